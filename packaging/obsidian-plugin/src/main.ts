/**
 * The Cairn plugin: registers the sidebar view (ribbon icon + commands) and the settings tab, finds
 * the daemon (settings, else its service.json, else http://127.0.0.1:27183) and opens cited notes.
 */

import { App, Plugin, PluginSettingTab, requestUrl, Setting, TFile, WorkspaceLeaf } from "obsidian";
import { CairnClient } from "./api";
import type { NoteTarget } from "./citations";
import {
  CairnSettings, DEFAULT_SETTINGS, DEFAULT_URL, effectiveUrl, isLoopbackHttpUrl, normaliseSettings, parseTags,
  isServiceFileName, pickServiceUrl, serviceFileCandidates, serviceInfoFromJson, ServiceInfo,
} from "./settings";
import { CairnHost, CairnView, VIEW_TYPE } from "./view";

export default class CairnPlugin extends Plugin implements CairnHost {
  settings: CairnSettings = { ...DEFAULT_SETTINGS };

  async onload(): Promise<void> {
    this.settings = normaliseSettings(await this.loadData());
    this.registerView(VIEW_TYPE, (leaf) => new CairnView(leaf, this));
    this.addRibbonIcon("search", "Open Cairn", () => void this.activateView());
    this.addCommand({ id: "open-sidebar", name: "Open the Cairn sidebar", callback: () => void this.activateView() });
    this.addCommand({
      id: "ask",
      name: "Ask your notes",
      callback: async () => (await this.activateView())?.focusAsk(),
    });
    this.addSettingTab(new CairnSettingTab(this.app, this));
  }

  async onunload(): Promise<void> {
    /* the view's leaves are closed by Obsidian; nothing else to release */
  }

  /** Open (or reveal) the sidebar in the right split. */
  async activateView(): Promise<CairnView | null> {
    const { workspace } = this.app;
    let leaf: WorkspaceLeaf | null = workspace.getLeavesOfType(VIEW_TYPE)[0] ?? null;
    if (!leaf) {
      leaf = workspace.getRightLeaf(false);
      if (!leaf) return null;
      await leaf.setViewState({ type: VIEW_TYPE, active: true });
    }
    await workspace.revealLeaf(leaf);
    return leaf.view instanceof CairnView ? leaf.view : null;
  }

  /** The daemon URL: settings, else service.json (read now: a restarted daemon may be on another port), else the default. */
  daemonUrl(): string {
    return effectiveUrl(this.settings, this.settings.daemonUrl ? undefined : discoverServiceUrl(this.vaultPath()));
  }

  /** This vault's folder on disk, symlinks resolved as the daemon resolves it (desktop only). */
  vaultPath(): string | undefined {
    const adapter = this.app.vault.adapter as { getBasePath?: () => string };
    const base = typeof adapter.getBasePath === "function" ? adapter.getBasePath() : undefined;
    if (!base) return undefined;
    try {
      // eslint-disable-next-line @typescript-eslint/no-var-requires
      return (require("fs") as typeof import("fs")).realpathSync(base);
    } catch {
      return base;
    }
  }

  client(): CairnClient {
    return new CairnClient({ baseUrl: this.daemonUrl(), token: this.settings.token, probe: probeHealth });
  }

  async openTarget(target: NoteTarget): Promise<void> {
    const file = this.app.vault.getAbstractFileByPath(target.path);
    if (file instanceof TFile) {
      const eState = target.line !== undefined ? { line: target.line } : target.subpath ? { subpath: target.subpath } : undefined;
      await this.app.workspace.getLeaf(false).openFile(file, { active: true, eState });
      return;
    }
    await this.app.workspace.openLinkText(target.path + (target.subpath ?? ""), "", false);
  }

  async saveSettings(): Promise<void> {
    await this.saveData(this.settings);
    for (const leaf of this.app.workspace.getLeavesOfType(VIEW_TYPE)) {
      if (leaf.view instanceof CairnView) leaf.view.settingsChanged();
    }
  }
}

/**
 * The URL the daemon of `vault` advertises in its data folder (`service-<index>.json`, or `service.json`), when
 * readable (desktop only: needs Node's fs); see {@link pickServiceUrl}. Undefined when there is no such record,
 * it is unreadable, or its URL is not a loopback http URL.
 */
export function discoverServiceUrl(vault?: string): string | undefined {
  try {
    // eslint-disable-next-line @typescript-eslint/no-var-requires
    const fs = require("fs") as typeof import("fs");
    const os = require("os") as typeof import("os");
    const path = require("path") as typeof import("path");
    const proc = (globalThis as { process?: { platform: string; env: Record<string, string | undefined> } }).process;
    if (!proc) return undefined;
    for (const file of serviceFileCandidates(proc.platform, proc.env, os.homedir())) {
      const dir = path.dirname(file);
      let names: string[];
      try {
        names = fs.readdirSync(dir).filter(isServiceFileName);
      } catch {
        continue; /* not there */
      }
      names.sort((a, b) => (a === "service.json" ? -1 : b === "service.json" ? 1 : a.localeCompare(b)));
      const records: ServiceInfo[] = [];
      for (const name of names) {
        try {
          const info = serviceInfoFromJson(fs.readFileSync(path.join(dir, name), "utf8"));
          if (info) records.push(info);
        } catch {
          /* removed meanwhile */
        }
      }
      const url = pickServiceUrl(records, vault);
      if (url) return url;
    }
  } catch {
    /* not the desktop app */
  }
  return undefined;
}

/** Does anything answer `GET /health` (Obsidian's requestUrl: no CORS)? Tells "not running" from "refused". */
async function probeHealth(url: string): Promise<boolean> {
  try {
    const res = await requestUrl({ url, method: "GET", throw: false });
    return res.status > 0;
  } catch {
    return false;
  }
}

class CairnSettingTab extends PluginSettingTab {
  constructor(app: App, private readonly plugin: CairnPlugin) {
    super(app, plugin);
  }

  display(): void {
    const { containerEl } = this;
    containerEl.empty();
    const discovered = discoverServiceUrl(this.plugin.vaultPath());
    new Setting(containerEl)
      .setName("Daemon URL")
      .setDesc(
        `Where \`cairn serve\` listens. Leave empty to use the address the running daemon advertises ` +
          `(${discovered ? `now ${discovered}` : "none found"}), else ${DEFAULT_URL}. Only 127.0.0.1, localhost or [::1].`,
      )
      .addText((text) =>
        text
          .setPlaceholder(discovered ?? DEFAULT_URL)
          .setValue(this.plugin.settings.daemonUrl)
          .onChange(async (value) => {
            const url = value.trim();
            const ok = !url || isLoopbackHttpUrl(url);
            text.inputEl.toggleClass("cairn-invalid", !ok);
            if (!ok) return; // never send the token to another machine
            this.plugin.settings.daemonUrl = url;
            await this.plugin.saveSettings();
          }),
      );
    new Setting(containerEl)
      .setName("Token")
      .setDesc("Run `cairn token` in a terminal and paste what it prints. Kept in this plugin's data, never logged.")
      .addText((text) => {
        text.inputEl.type = "password";
        text.inputEl.autocomplete = "off";
        text
          .setPlaceholder("paste the output of `cairn token`")
          .setValue(this.plugin.settings.token)
          .onChange(async (value) => {
            this.plugin.settings.token = value.trim();
            await this.plugin.saveSettings();
          });
      });
    new Setting(containerEl)
      .setName("Results (top_k)")
      .setDesc("Search results shown, and passages an answer may cite (1–50; the daemon's default is 8).")
      .addSlider((slider) =>
        slider
          .setLimits(1, 50, 1)
          .setValue(this.plugin.settings.topK)
          .setDynamicTooltip()
          .onChange(async (value) => {
            this.plugin.settings.topK = value;
            await this.plugin.saveSettings();
          }),
      );
    new Setting(containerEl)
      .setName("Default tag scope")
      .setDesc("Tags Ask and Search start with, comma-separated (notes carrying any of them; nested tags match). Empty: all notes.")
      .addText((text) =>
        text
          .setPlaceholder("e.g. garden, kitchen")
          .setValue(this.plugin.settings.defaultTags.join(", "))
          .onChange(async (value) => {
            this.plugin.settings.defaultTags = parseTags(value);
            await this.plugin.saveSettings();
          }),
      );
  }
}
