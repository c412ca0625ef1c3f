/**
 * The Cairn plugin: registers the sidebar view (ribbon icon + commands) and the settings tab, finds this
 * vault's daemon (settings, else the record it writes in its data folder; believed once its /health names this
 * vault: discovery.ts) and opens cited notes.
 */

import { App, Plugin, PluginSettingTab, requestUrl, Setting, TFile, WorkspaceLeaf } from "obsidian";
import { CairnClient } from "./api";
import type { NoteTarget } from "./citations";
import { discoverServiceUrl, verifyDaemon } from "./discovery";
import { CairnError } from "./errors";
import { CairnSettings, DEFAULT_SETTINGS, DEFAULT_URL, effectiveUrl, isLoopbackHttpUrl, normaliseSettings, parseTags } from "./settings";
import { CairnHost, CairnView, VIEW_TYPE } from "./view";

export { discoverServiceUrl, findDaemon, verifyDaemon, vaultIdOf } from "./discovery";

/** How long a daemon that proved it serves this vault is believed without asking again (ms). */
const VERIFIED_MS = 15_000;

export default class CairnPlugin extends Plugin implements CairnHost {
  settings: CairnSettings = { ...DEFAULT_SETTINGS };
  /** Daemon URLs that proved they serve this vault → when (Date.now()). */
  private verified = new Map<string, number>();
  /** Raised by each settings change: a check that began before one vouches for nothing after it. */
  private checks = 0;

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

  /** data.json changed on disk (`cairn plugin install` gave a new token, or a sync): use it at once. */
  async onExternalSettingsChange(): Promise<void> {
    this.settings = normaliseSettings(await this.loadData());
    this.verified.clear();
    this.checks++;
    this.refreshViews();
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

  /** The daemon URL: settings, else this vault's record (read now: a restarted daemon may be on another port); "" when none. */
  daemonUrl(): string {
    return effectiveUrl(this.settings, this.settings.daemonUrl ? undefined : discoverServiceUrl(this.vaultPath()));
  }

  /**
   * Throws unless the daemon at `url` serves this vault (believed for {@link VERIFIED_MS}; `again`: ask now): a
   * CairnError `elsewhere` for another vault's daemon or another program, `offline` when nothing answers.
   */
  async checkDaemon(url: string, again = false): Promise<void> {
    const at = this.verified.get(url);
    if (!again && at !== undefined && Date.now() - at < VERIFIED_MS) return;
    this.verified.delete(url);
    const began = this.checks;
    const found = await verifyDaemon(url, this.vaultPath(), healthJson);
    // The settings (this vault's folder, the URL) changed while /health was asked: check again, as they are now.
    if (began !== this.checks) return this.checkDaemon(url, true);
    if (found.kind === "elsewhere") throw new CairnError("elsewhere", found.message);
    if (found.kind === "offline") throw new CairnError("offline", "Nothing answered.");
    this.verified.set(url, Date.now());
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
    return new CairnClient({
      baseUrl: this.daemonUrl(),
      token: this.settings.token,
      probe: probeHealth,
      check: (url, again) => this.checkDaemon(url, again),
    });
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
    this.refreshViews();
  }

  private refreshViews(): void {
    for (const leaf of this.app.workspace.getLeavesOfType(VIEW_TYPE)) {
      if (leaf.view instanceof CairnView) leaf.view.settingsChanged();
    }
  }
}

/** `GET /health` with Obsidian's requestUrl (no CORS) → its JSON, or null when nothing (or nothing JSON) answers. */
async function healthJson(url: string): Promise<unknown> {
  try {
    const res = await requestUrl({ url, method: "GET", throw: false });
    return res.status === 200 ? res.json : null;
  } catch {
    return null;
  }
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
    const vault = this.plugin.vaultPath() ?? "<this vault's folder>";
    const discovered = discoverServiceUrl(this.plugin.vaultPath());
    new Setting(containerEl)
      .setName("Daemon URL")
      .setDesc(
        `Where \`cairn serve\` listens for this vault. Leave empty to use the address this vault's running daemon ` +
          `advertises (${discovered ? `now ${discovered}` : "none found: Cairn isn't running for this vault"}). ` +
          `Only 127.0.0.1, localhost or [::1], and only a daemon that proves it serves this vault.`,
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
      .setDesc(
        `This vault's own token: \`cairn plugin install --vault "${vault}"\` puts it here, or paste what ` +
          `\`cairn token --vault "${vault}"\` prints. Kept in this plugin's data.json in the vault's .obsidian folder ` +
          "(it travels with the vault when synced; it opens only this vault's daemon), never logged.",
      )
      .addText((text) => {
        text.inputEl.type = "password";
        text.inputEl.autocomplete = "off";
        text
          .setPlaceholder("the output of `cairn token --vault …`")
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
