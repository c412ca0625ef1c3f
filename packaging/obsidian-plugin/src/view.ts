/**
 * The Cairn sidebar: Ask (a conversation of streamed, cited answers: ask.ts), Search (as you type), Related (for
 * the active note), a tag-scope picker shared by Ask and Search, and the index status line.
 *
 * It talks to the daemon only through {@link CairnClient}; every failure is shown inline in the
 * pane it happened in (see errors.ts), with a Retry button where retrying can help.
 */

import { ItemView, WorkspaceLeaf } from "obsidian";
import type { CairnClient } from "./api";
import { AskPane, metaLine } from "./ask";
import { highlightRuns, locationLabel, NoteTarget, sourceLabel, targetOf } from "./citations";
import { renderCoverage } from "./coverage";
import { clear, h, show } from "./dom";
import { CairnError, describeError, toCairnError } from "./errors";
import { relevanceText } from "./relevance";
import type { CairnSettings } from "./settings";
import { renderRecent } from "./recent";
import { progressLine, statsLine } from "./status";
import type { Coverage, RelatedResponse, SearchHit, TagCount } from "./types";

export const VIEW_TYPE = "cairn-sidebar";
/** Typing pause before a search is sent (ms). */
export const SEARCH_DEBOUNCE_MS = 250;
/** Shortest query searched (characters); below it the Search tab lists the most recently modified notes. */
export const MIN_QUERY_CHARS = 2;
/** Reconnect delays for the index event stream (ms), the last one repeated. */
const EVENTS_BACKOFF_MS = [2000, 5000, 10000, 30000];

/** What the view needs from the plugin. */
export interface CairnHost {
  readonly settings: CairnSettings;
  /** A client for the current settings (URL re-discovered each time: a restarted daemon may have moved). */
  client(): CairnClient;
  /** The URL the client talks to (shown in "nothing answered at ..."). */
  daemonUrl(): string;
  /** Open a note at a line or subpath in the main area. */
  openTarget(target: NoteTarget): Promise<void>;
}

type Tab = "ask" | "search" | "related";

export class CairnView extends ItemView {
  private tab: Tab = "ask";
  private tagScope: string[] = [];
  private knownTags: TagCount[] = [];
  private tabButtons = new Map<Tab, HTMLButtonElement>();
  private panes = new Map<Tab, HTMLElement>();
  private root!: HTMLElement;
  private scopeEl!: HTMLElement;
  private statusEl!: HTMLElement;
  private askPane: AskPane | null = null;
  // Search
  private searchInput!: HTMLInputElement;
  private searchResultsEl!: HTMLElement;
  private searchTimer: number | null = null;
  private searchController: AbortController | null = null;
  // Related
  private relatedEl!: HTMLElement;
  private relatedController: AbortController | null = null;
  private relatedPath: string | null = null;
  // Status
  private eventsController: AbortController | null = null;
  private eventsTimer: number | null = null;
  private eventsFailures = 0;
  private closed = false;

  constructor(leaf: WorkspaceLeaf, private readonly host: CairnHost) {
    super(leaf);
    this.tagScope = [...host.settings.defaultTags];
  }

  getViewType(): string {
    return VIEW_TYPE;
  }

  getDisplayText(): string {
    return "Cairn";
  }

  getIcon(): string {
    return "search";
  }

  async onOpen(): Promise<void> {
    this.closed = false;
    const container = this.contentEl;
    clear(container);
    this.root = h("div", { cls: "cairn-view" }, container);
    const tabs = h("div", { cls: "cairn-tabs", role: "tablist" }, this.root);
    for (const [tab, label] of [["ask", "Ask"], ["search", "Search"], ["related", "Related"]] as [Tab, string][]) {
      const b = h("button", { cls: "cairn-tab", role: "tab", text: label, "data-tab": tab }, tabs);
      b.addEventListener("click", () => this.setTab(tab));
      this.tabButtons.set(tab, b);
    }
    this.scopeEl = h("div", { cls: "cairn-scope" }, this.root);
    this.buildAsk(h("div", { cls: "cairn-pane cairn-pane-ask" }, this.root));
    this.buildSearch(h("div", { cls: "cairn-pane cairn-pane-search" }, this.root));
    this.buildRelated(h("div", { cls: "cairn-pane cairn-pane-related" }, this.root));
    this.statusEl = h("div", { cls: "cairn-status", "aria-live": "polite" }, this.root);
    this.setTab("ask");
    this.renderScope();
    this.registerEvent(this.app.workspace.on("file-open", () => this.refreshRelated()));
    this.registerEvent(this.app.workspace.on("active-leaf-change", () => this.refreshRelated()));
    this.reconnect();
  }

  async onClose(): Promise<void> {
    this.closed = true;
    this.askPane?.close();
    this.searchController?.abort();
    this.relatedController?.abort();
    this.eventsController?.abort();
    for (const t of [this.searchTimer, this.eventsTimer]) if (t !== null) window.clearTimeout(t);
  }

  /** Settings changed (URL, token, top_k): reconnect and refresh what is shown. */
  settingsChanged(): void {
    if (!this.root) return;
    this.reconnect();
  }

  /** Put the cursor in the question box (the "Ask Cairn" command). */
  focusAsk(): void {
    this.setTab("ask");
    this.askPane?.focus();
  }

  // -- tabs and scope ------------------------------------------------------------------------

  private setTab(tab: Tab): void {
    this.tab = tab;
    for (const [t, b] of this.tabButtons) {
      b.classList.toggle("is-active", t === tab);
      b.setAttribute("aria-selected", String(t === tab));
    }
    for (const [t, pane] of this.panes) show(pane, t === tab);
    if (this.scopeEl) show(this.scopeEl, tab !== "related");
    if (tab === "related") this.refreshRelated();
    if (tab === "search") {
      this.searchInput?.focus();
      if (this.showsRecent()) void this.runSearch(); // the recent notes, as they are now
    }
  }

  private renderScope(): void {
    const el = this.scopeEl;
    clear(el);
    h("span", { cls: "cairn-scope-label", text: "Scope:" }, el);
    if (!this.tagScope.length) h("span", { cls: "cairn-chip cairn-chip-all", text: "all notes" }, el);
    for (const tag of this.tagScope) {
      const chip = h("span", { cls: "cairn-chip", text: `#${tag}` }, el);
      const x = h("button", { cls: "cairn-chip-remove", "aria-label": `Remove #${tag} from the scope`, text: "×" }, chip);
      x.addEventListener("click", () => this.setScope(this.tagScope.filter((t) => t !== tag)));
    }
    const select = h("select", { cls: "cairn-scope-select dropdown", "aria-label": "Add a tag to the scope" }, el);
    h("option", { value: "", text: this.knownTags.length ? "+ tag…" : "+ tag (none loaded)" }, select);
    for (const t of this.knownTags) {
      if (this.tagScope.includes(t.tag)) continue;
      h("option", { value: t.tag, text: `#${t.tag} (${t.count})` }, select);
    }
    select.addEventListener("change", () => {
      if (select.value) this.setScope([...this.tagScope, select.value]);
    });
  }

  private setScope(tags: string[]): void {
    this.tagScope = tags;
    this.renderScope();
    if (this.searchInput?.value.trim() || this.tab === "search") this.runSearch();
  }

  private async loadTags(): Promise<void> {
    try {
      const res = await this.host.client().tags();
      this.knownTags = Array.isArray(res.tags) ? res.tags : [];
    } catch {
      this.knownTags = []; // the status line says why; the picker just has nothing to offer
    }
    if (!this.closed) this.renderScope();
  }

  // -- error boxes ---------------------------------------------------------------------------

  private showError(box: HTMLElement, err: unknown, retry?: () => void): CairnError {
    const e = toCairnError(err);
    const d = describeError(e, this.host.daemonUrl());
    clear(box);
    box.className = `cairn-error cairn-error-${d.kind}`;
    h("div", { cls: "cairn-error-title", text: d.title }, box);
    if (d.detail) h("div", { cls: "cairn-error-detail", text: d.detail }, box);
    if (d.retry && retry) {
      const b = h("button", { cls: "cairn-retry mod-cta", text: "Retry" }, box);
      b.addEventListener("click", () => {
        if (e.kind === "offline" || e.kind === "unauthorized" || e.kind === "no-token" || e.kind === "blocked") this.reconnect();
        retry();
      });
    }
    show(box, true);
    return e;
  }

  // -- Ask -----------------------------------------------------------------------------------

  private buildAsk(pane: HTMLElement): void {
    this.panes.set("ask", pane);
    this.askPane = new AskPane(
      {
        app: this.app,
        client: () => this.host.client(),
        topK: () => this.host.settings.topK,
        tags: () => this.tagScope,
        openTarget: (target) => this.host.openTarget(target),
        showError: (box, err, retry) => this.showError(box, err, retry),
        isClosed: () => this.closed,
      },
      pane,
    );
  }

  /** Ask the question in the box (a follow-up of the turns shown, until "New conversation"). */
  async ask(): Promise<void> {
    await this.askPane?.ask();
  }

  // -- Search --------------------------------------------------------------------------------

  private buildSearch(pane: HTMLElement): void {
    this.panes.set("search", pane);
    this.searchInput = h("input", { cls: "cairn-search-input", type: "search", placeholder: "Search your notes…", "aria-label": "Search" }, pane);
    this.searchInput.addEventListener("input", () => {
      if (this.searchTimer !== null) window.clearTimeout(this.searchTimer);
      this.searchTimer = window.setTimeout(() => {
        this.searchTimer = null;
        void this.runSearch();
      }, SEARCH_DEBOUNCE_MS);
    });
    this.searchResultsEl = h("div", { cls: "cairn-search-results" }, pane);
  }

  /** The box holds nothing to search for yet: the tab lists the most recently modified notes. */
  private showsRecent(): boolean {
    return (this.searchInput?.value.trim().length ?? 0) < MIN_QUERY_CHARS;
  }

  private async runSearch(): Promise<void> {
    const recent = this.showsRecent();
    const q = recent ? "" : this.searchInput.value.trim();
    this.searchController?.abort();
    const controller = new AbortController();
    this.searchController = controller;
    this.searchResultsEl.classList.add("is-loading");
    try {
      const res = await this.host.client().search(q, { topK: this.host.settings.topK, tags: this.tagScope, signal: controller.signal });
      if (controller !== this.searchController) return;
      if (recent) {
        clear(this.searchResultsEl);
        renderRecent(this.searchResultsEl, res.results ?? [], (t) => void this.host.openTarget(t), this.tagScope.length > 0);
      } else {
        this.renderResults(q, res.results ?? [], res.coverage);
      }
    } catch (err) {
      if (controller !== this.searchController) return;
      const e = toCairnError(err);
      if (e.kind === "aborted") return;
      clear(this.searchResultsEl);
      if (recent && e.status === 400) return; // a daemon older than recent notes: an empty box stays empty
      this.showError(h("div", {}, this.searchResultsEl), e, () => void this.runSearch());
    } finally {
      if (controller === this.searchController) this.searchResultsEl.classList.remove("is-loading");
    }
  }

  private renderResults(q: string, hits: SearchHit[], coverage?: Coverage): void {
    const el = this.searchResultsEl;
    clear(el);
    renderCoverage(el, coverage);
    if (!hits.length) {
      h("div", { cls: "cairn-empty", text: "No notes match (nothing passed the relevance floor)." }, el);
      return;
    }
    for (const hit of hits) {
      const item = h("div", { cls: "cairn-result" }, el);
      const title = h("a", { cls: "cairn-result-title", href: "#", text: sourceLabel(hit) }, item);
      title.addEventListener("click", (ev) => {
        ev.preventDefault();
        void this.host.openTarget(targetOf(hit));
      });
      metaLine(h("div", { cls: "cairn-result-meta" }, item), "cairn-result-where", locationLabel(hit), hit.relevance);
      const snippet = h("div", { cls: "cairn-result-snippet" }, item);
      for (const run of highlightRuns(hit.snippet ?? "", q)) {
        if (run.match) h("mark", { text: run.text }, snippet);
        else snippet.appendChild(document.createTextNode(run.text));
      }
    }
  }

  // -- Related -------------------------------------------------------------------------------

  private buildRelated(pane: HTMLElement): void {
    this.panes.set("related", pane);
    this.relatedEl = h("div", { cls: "cairn-related" }, pane);
  }

  private async refreshRelated(force = false): Promise<void> {
    if (!this.relatedEl || this.tab !== "related") return;
    const file = this.app.workspace.getActiveFile();
    const path = file && file.extension === "md" ? file.path : null;
    if (!force && path === this.relatedPath && this.relatedEl.childElementCount) return;
    this.relatedPath = path;
    this.relatedController?.abort();
    clear(this.relatedEl);
    if (!path) {
      h("div", { cls: "cairn-empty", text: "Open a note to see its links, backlinks and similar notes." }, this.relatedEl);
      return;
    }
    const controller = new AbortController();
    this.relatedController = controller;
    h("div", { cls: "cairn-related-for", text: path }, this.relatedEl);
    try {
      const res = await this.host.client().related(path, 10, controller.signal);
      if (controller !== this.relatedController) return;
      this.renderRelated(res);
    } catch (err) {
      if (controller !== this.relatedController) return;
      const e = toCairnError(err);
      if (e.kind === "aborted") return;
      if (e.status === 404) {
        h("div", { cls: "cairn-empty", text: "This note isn't in Cairn's index yet (new, excluded, or still indexing)." }, this.relatedEl);
        return;
      }
      this.showError(h("div", {}, this.relatedEl), e, () => void this.refreshRelated(true));
    }
  }

  private renderRelated(res: RelatedResponse): void {
    const el = this.relatedEl;
    const section = (title: string, rows: { label: string; meta?: string; relevance?: unknown; target?: NoteTarget }[], empty: string) => {
      h("div", { cls: "cairn-section-title", text: title }, el);
      if (!rows.length) {
        h("div", { cls: "cairn-empty", text: empty }, el);
        return;
      }
      const list = h("ul", { cls: "cairn-related-list" }, el);
      for (const row of rows) {
        const li = h("li", {}, list);
        if (row.target) {
          const a = h("a", { href: "#", text: row.label }, li);
          const target = row.target;
          a.addEventListener("click", (ev) => {
            ev.preventDefault();
            void this.host.openTarget(target);
          });
        } else {
          h("span", { cls: "cairn-unresolved", text: row.label, title: "Not a note in the vault" }, li);
        }
        if (row.meta || relevanceText(row.relevance)) metaLine(li, "cairn-related-meta", row.meta ?? "", row.relevance);
      }
    };
    const seen = new Set<string>();
    const links = [];
    for (const l of res.links ?? []) {
      const key = l.targetPath ?? `?${l.target}`;
      if (seen.has(key)) continue;
      seen.add(key);
      links.push({
        label: l.targetPath ?? l.target,
        meta: l.targetPath ? undefined : "unresolved",
        target: l.targetPath ? { path: l.targetPath, subpath: l.heading ? `#${l.heading}` : undefined } : undefined,
      });
    }
    section("Links", links, "No outgoing links.");
    const backlinks = new Map<string, { label: string; target: NoteTarget }>();
    for (const b of res.backlinks ?? []) {
      // One row per linking note, opening at its first link here.
      if (backlinks.has(b.filePath)) continue;
      const line = typeof b.line === "number" && b.line >= 1 ? b.line - 1 : undefined;
      backlinks.set(b.filePath, { label: b.filePath, target: { path: b.filePath, line } });
    }
    section("Backlinks", [...backlinks.values()], "No notes link here.");
    section("Similar notes", (res.similar ?? []).map((s) => ({
      label: s.title || s.filePath,
      meta: s.filePath.includes("/") ? s.filePath.slice(0, s.filePath.lastIndexOf("/") + 1) : "",
      relevance: s.relevance,
      target: { path: s.filePath },
    })), "Nothing similar yet (vectors may still be computing).");
  }

  // -- connection and status -----------------------------------------------------------------

  /** (Re)connect: index stats, the tag list and the event stream; refresh Related. */
  private reconnect(): void {
    this.eventsController?.abort();
    if (this.eventsTimer !== null) window.clearTimeout(this.eventsTimer);
    this.eventsTimer = null;
    this.eventsFailures = 0;
    void this.refreshStats();
    void this.loadTags();
    void this.followEvents();
    if (this.tab === "related") void this.refreshRelated(true);
  }

  private setStatus(text: string, kind: "ok" | "busy" | "error" = "ok"): void {
    if (!this.statusEl) return;
    this.statusEl.textContent = text;
    this.statusEl.className = `cairn-status cairn-status-${kind}`;
  }

  private async refreshStats(): Promise<boolean> {
    try {
      const stats = await this.host.client().stats();
      if (this.closed) return true;
      if (stats.indexing && !this.statusEl.classList.contains("cairn-status-busy")) this.setStatus("Indexing…", "busy");
      else if (!stats.indexing) this.setStatus(statsLine(stats), "ok");
      return true;
    } catch (err) {
      if (this.closed) return false;
      const d = describeError(err, this.host.daemonUrl());
      this.setStatus(d.title, "error");
      return false;
    }
  }

  private async followEvents(): Promise<void> {
    const controller = new AbortController();
    this.eventsController = controller;
    try {
      await this.host.client().events(
        {
          onOpen: () => {
            if (this.eventsFailures > 0) {
              // Back after an outage: the stats, tags and related notes may all have changed.
              void this.refreshStats();
              void this.loadTags();
            }
            this.eventsFailures = 0;
          },
          onProgress: (p) => {
            if (p.done < p.total) this.setStatus(progressLine(p), "busy");
            else void this.refreshStats();
          },
          onIndexed: () => {
            void this.refreshStats();
            void this.loadTags();
            if (this.tab === "search" && this.showsRecent()) void this.runSearch(); // a note saved: the list follows
          },
          onIndexError: (data) => {
            const { message, code } = (data ?? {}) as { message?: string; code?: string };
            if (code === "shutting_down") this.setStatus(message ?? "The Cairn daemon is stopping.", "error");
            else this.setStatus(`Indexing problem: ${message ?? "see the daemon's log"}`, "error");
          },
        },
        controller.signal,
      );
    } catch (err) {
      if (controller !== this.eventsController || this.closed) return;
      const e = toCairnError(err);
      if (e.kind === "aborted") return;
      this.setStatus(describeError(e, this.host.daemonUrl()).title, "error");
    }
    if (controller !== this.eventsController || this.closed || controller.signal.aborted) return;
    // The stream ended or failed: try again later (the daemon may be restarting).
    const delay = EVENTS_BACKOFF_MS[Math.min(this.eventsFailures, EVENTS_BACKOFF_MS.length - 1)];
    this.eventsFailures++;
    this.eventsTimer = window.setTimeout(() => {
      this.eventsTimer = null;
      void this.refreshStats().then((ok) => {
        if (ok && this.eventsFailures > 0) void this.loadTags();
      });
      void this.followEvents();
    }, delay);
  }
}
