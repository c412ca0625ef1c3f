/**
 * The Cairn sidebar: Ask (streamed, cited answers), Search (as you type), Related (for the active
 * note), a tag-scope picker shared by Ask and Search, and the index status line.
 *
 * It talks to the daemon only through {@link CairnClient}; every failure is shown inline in the
 * pane it happened in (see errors.ts), with a Retry button where retrying can help.
 */

import { Component, ItemView, MarkdownRenderer, WorkspaceLeaf } from "obsidian";
import type { CairnClient } from "./api";
import { highlightRuns, locationLabel, NoteTarget, sourceLabel, targetOf } from "./citations";
import { renderCoverage } from "./coverage";
import { clear, h, linkCitations, show } from "./dom";
import { CairnError, describeError, toCairnError } from "./errors";
import { groupSources, relevanceHint, relevanceText } from "./relevance";
import type { CairnSettings } from "./settings";
import { progressLine, statsLine } from "./status";
import type { AnswerSource, AskDone, Coverage, RelatedResponse, SearchHit, TagCount } from "./types";

export const VIEW_TYPE = "cairn-sidebar";
/** Typing pause before a search is sent (ms). */
export const SEARCH_DEBOUNCE_MS = 250;
/** Shortest query searched (characters). */
export const MIN_QUERY_CHARS = 2;
/** At most one Markdown re-render of a streaming answer per this many ms. */
const RENDER_EVERY_MS = 50;
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
  // Ask
  private questionEl!: HTMLTextAreaElement;
  private askButton!: HTMLButtonElement;
  private stopButton!: HTMLButtonElement;
  private askBannerEl!: HTMLElement;
  private answerEl!: HTMLElement;
  private askNoteEl!: HTMLElement;
  private sourcesEl!: HTMLElement;
  private askErrorEl!: HTMLElement;
  private askController: AbortController | null = null;
  private answerText = "";
  private sources: AnswerSource[] = [];
  private renderTimer: number | null = null;
  private renderChild: Component | null = null;
  private renderSeq = 0;
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
    this.askController?.abort();
    this.searchController?.abort();
    this.relatedController?.abort();
    this.eventsController?.abort();
    for (const t of [this.renderTimer, this.searchTimer, this.eventsTimer]) if (t !== null) window.clearTimeout(t);
    this.renderChild?.unload();
  }

  /** Settings changed (URL, token, top_k): reconnect and refresh what is shown. */
  settingsChanged(): void {
    if (!this.root) return;
    this.reconnect();
  }

  /** Put the cursor in the question box (the "Ask Cairn" command). */
  focusAsk(): void {
    this.setTab("ask");
    this.questionEl?.focus();
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
    if (tab === "search") this.searchInput?.focus();
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
    if (this.searchInput?.value.trim()) this.runSearch();
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
    const form = h("form", { cls: "cairn-ask-form" }, pane);
    this.questionEl = h("textarea", { cls: "cairn-question", rows: 3, placeholder: "Ask your notes…", "aria-label": "Question" }, form);
    const buttons = h("div", { cls: "cairn-ask-buttons" }, form);
    this.askButton = h("button", { cls: "cairn-ask-button mod-cta", type: "submit", text: "Ask" }, buttons);
    this.stopButton = h("button", { cls: "cairn-stop-button", type: "button", text: "Stop" }, buttons);
    show(this.stopButton, false);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      void this.ask();
    });
    this.questionEl.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        void this.ask();
      }
    });
    this.stopButton.addEventListener("click", () => this.askController?.abort());
    this.askErrorEl = h("div", { cls: "cairn-error" }, pane);
    show(this.askErrorEl, false);
    this.askBannerEl = h("div", { cls: "cairn-banner cairn-banner-ungrounded" }, pane);
    show(this.askBannerEl, false);
    this.answerEl = h("div", { cls: "cairn-answer markdown-rendered" }, pane);
    this.answerEl.addEventListener("click", (ev) => {
      const a = (ev.target as HTMLElement | null)?.closest?.("a.cairn-cite") as HTMLAnchorElement | null;
      if (!a) return;
      ev.preventDefault();
      const source = this.sources.find((s) => s.n === Number(a.dataset.n));
      if (source) void this.host.openTarget(targetOf(source));
    });
    this.askNoteEl = h("div", { cls: "cairn-ask-note" }, pane);
    this.sourcesEl = h("div", { cls: "cairn-sources" }, pane);
  }

  /** Ask the question in the box; the answer streams into the pane. */
  async ask(): Promise<void> {
    const question = this.questionEl.value.trim();
    if (!question) return;
    this.askController?.abort();
    const controller = new AbortController();
    this.askController = controller;
    this.answerText = "";
    this.sources = [];
    clear(this.answerEl);
    clear(this.sourcesEl);
    clear(this.askNoteEl);
    show(this.askErrorEl, false);
    show(this.askBannerEl, false);
    this.answerEl.classList.remove("cairn-notfound");
    this.answerEl.classList.add("is-streaming");
    this.askButton.disabled = true;
    show(this.stopButton, true);
    let done: AskDone | null = null;
    const streamErrors: string[] = [];
    try {
      done = await this.host.client().ask(
        question,
        {
          onToken: (text) => {
            if (controller !== this.askController) return;
            this.answerText += text;
            this.scheduleRender();
          },
          onReplace: (text) => {
            if (controller !== this.askController) return;
            this.answerText = text;
            this.scheduleRender();
          },
          onSources: (sources) => {
            if (controller !== this.askController) return;
            this.sources = sources;
            this.renderSources();
            this.scheduleRender(true);
          },
          onStreamError: (e) => streamErrors.push(e.message),
        },
        { topK: this.host.settings.topK, tags: this.tagScope, signal: controller.signal },
      );
    } catch (err) {
      if (controller !== this.askController) return;
      const e = toCairnError(err);
      if (e.kind === "aborted") {
        h("span", { cls: "cairn-stopped", text: "Stopped." }, this.askNoteEl);
      } else {
        this.showError(this.askErrorEl, e, () => void this.ask());
      }
    } finally {
      if (controller === this.askController) {
        this.askController = null;
        this.askButton.disabled = false;
        show(this.stopButton, false);
        this.answerEl.classList.remove("is-streaming");
      }
    }
    if (controller !== this.askController && this.askController !== null) return;
    if (this.renderTimer !== null) {
      // No more tokens: the final render below replaces any pending one (it must not land after finishAnswer).
      window.clearTimeout(this.renderTimer);
      this.renderTimer = null;
    }
    await this.renderAnswer();
    if (this.askController !== null) return; // another question was asked meanwhile
    if (streamErrors.length) {
      this.showError(this.askErrorEl, new CairnError("server", streamErrors.join(" ")), () => void this.ask());
    }
    if (done) this.finishAnswer(done);
  }

  private finishAnswer(done: AskDone): void {
    if (done.notFound) {
      clear(this.answerEl);
      this.answerEl.classList.add("cairn-notfound");
      h("div", { cls: "cairn-notfound-title", text: "Not found in your notes" }, this.answerEl);
      h("div", { cls: "cairn-notfound-text", text: this.answerText.trim() || "I couldn't find this in your indexed notes." }, this.answerEl);
      h("div", {
        cls: "cairn-notfound-hint",
        text: this.tagScope.length ? "Nothing in the scope passed the relevance floor. Try other words, or widen the tag scope." : "Nothing in your notes passed the relevance floor. Try other words.",
      }, this.answerEl);
      clear(this.sourcesEl);
    } else if (!done.grounded) {
      clear(this.askBannerEl);
      h("strong", { text: "Built from your notes' own sentences. " }, this.askBannerEl);
      const why = done.fallback ?? "No language model wrote this answer (none is configured, or it did not answer).";
      h("span", { text: `${why} Each sentence is quoted from the cited note.` }, this.askBannerEl);
      show(this.askBannerEl, true);
    }
    renderCoverage(this.askNoteEl, done.coverage);
    const secs = (done.elapsedMs / 1000).toFixed(1);
    h("span", { cls: "cairn-elapsed", text: `Answered in ${secs} s` }, this.askNoteEl);
  }

  private scheduleRender(now = false): void {
    if (this.renderTimer !== null) {
      if (!now) return;
      window.clearTimeout(this.renderTimer);
    }
    this.renderTimer = window.setTimeout(() => {
      this.renderTimer = null;
      void this.renderAnswer();
    }, now ? 0 : RENDER_EVERY_MS);
  }

  /** Render the answer so far as Markdown, then turn its `[n]` into links (only known ones once sources came). */
  private async renderAnswer(): Promise<void> {
    const seq = ++this.renderSeq;
    const child = new Component();
    child.load();
    const target = document.createElement("div");
    await MarkdownRenderer.render(this.app, this.answerText, target, "", child);
    if (seq !== this.renderSeq || this.closed) {
      child.unload();
      return;
    }
    const known = this.sources.length ? new Set(this.sources.map((s) => s.n)) : undefined;
    for (const a of linkCitations(target, known)) {
      const source = this.sources.find((s) => s.n === Number(a.dataset.n));
      a.title = source ? `${sourceLabel(source)} ${locationLabel(source)}`.trim() : "source arriving…";
      if (!source) a.classList.add("is-pending");
    }
    this.renderChild?.unload();
    this.renderChild = child;
    clear(this.answerEl);
    while (target.firstChild) this.answerEl.appendChild(target.firstChild);
  }

  /** The sources the answer cites under "Sources", then the others it was given under "Also retrieved". */
  private renderSources(): void {
    clear(this.sourcesEl);
    if (!this.sources.length) return;
    const { cited, also } = groupSources(this.sources);
    for (const [title, group, cls] of [["Sources", cited, ""], ["Also retrieved", also, " cairn-source-list-also"]] as const) {
      if (!group.length) continue;
      h("div", { cls: "cairn-section-title", text: title }, this.sourcesEl);
      const list = h("ol", { cls: `cairn-source-list${cls}` }, this.sourcesEl);
      for (const s of group) {
        const li = h("li", { cls: "cairn-source", "data-n": s.n }, list);
        h("span", { cls: "cairn-source-n", text: `[${s.n}]` }, li);
        const link = h("a", { cls: "cairn-source-link", href: "#", text: sourceLabel(s) }, li);
        link.addEventListener("click", (ev) => {
          ev.preventDefault();
          void this.host.openTarget(targetOf(s));
        });
        this.meta(li, "cairn-source-meta", locationLabel(s), s.relevance);
      }
    }
  }

  /** A hit's meta line: where it is, then its relevance in words (with a tooltip), never the raw score. */
  private meta(parent: HTMLElement, cls: string, where: string, relevance: unknown): void {
    const el = h("span", { cls }, parent);
    if (where) el.appendChild(document.createTextNode(where));
    const words = relevanceText(relevance);
    if (!words) return;
    if (where) el.appendChild(document.createTextNode(" · "));
    h("span", { cls: `cairn-relevance cairn-relevance-${String(relevance)}`, text: words, title: relevanceHint(relevance) }, el);
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

  private async runSearch(): Promise<void> {
    const q = this.searchInput.value.trim();
    this.searchController?.abort();
    if (q.length < MIN_QUERY_CHARS) {
      clear(this.searchResultsEl);
      return;
    }
    const controller = new AbortController();
    this.searchController = controller;
    this.searchResultsEl.classList.add("is-loading");
    try {
      const res = await this.host.client().search(q, { topK: this.host.settings.topK, tags: this.tagScope, signal: controller.signal });
      if (controller !== this.searchController) return;
      this.renderResults(q, res.results ?? [], res.coverage);
    } catch (err) {
      if (controller !== this.searchController) return;
      const e = toCairnError(err);
      if (e.kind === "aborted") return;
      clear(this.searchResultsEl);
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
      this.meta(h("div", { cls: "cairn-result-meta" }, item), "cairn-result-where", locationLabel(hit), hit.relevance);
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
        if (row.meta || relevanceText(row.relevance)) this.meta(li, "cairn-related-meta", row.meta ?? "", row.relevance);
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
