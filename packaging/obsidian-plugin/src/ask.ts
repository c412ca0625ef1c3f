/**
 * The Ask tab as a conversation: each question is a turn (the question, its streamed answer, its sources),
 * listed oldest first above the question box. A new question sends the earlier finished turns as `history`, so a
 * follow-up ("and give it a custom title?") is retrieved with the question before it; each answer cites its own
 * turn's sources only. "New conversation" forgets the turns.
 */

import { App, Component, MarkdownRenderer } from "obsidian";
import type { CairnClient } from "./api";
import { locationLabel, NoteTarget, sourceLabel, targetOf } from "./citations";
import { renderCoverage } from "./coverage";
import { clear, h, linkCitations, show } from "./dom";
import { CairnError, toCairnError } from "./errors";
import { placeMarks, withMarks } from "./grounding";
import { groupSources, relevanceHint, relevanceText } from "./relevance";
import type { AnswerSource, AskDone, HistoryTurn, UnsupportedSentence } from "./types";

/** At most one Markdown re-render of a streaming answer per this many ms. */
const RENDER_EVERY_MS = 50;

/** What the Ask pane needs from the sidebar. */
export interface AskContext {
  readonly app: App;
  client(): CairnClient;
  topK(): number;
  /** The tag scope chosen in the sidebar. */
  tags(): string[];
  openTarget(target: NoteTarget): Promise<void>;
  /** Show `err` in `box` (with Retry when retrying can help). */
  showError(box: HTMLElement, err: unknown, retry?: () => void): CairnError;
  isClosed(): boolean;
}

/** One question and its answer, with the elements it is shown in. */
interface Turn {
  question: string;
  /** The earlier turns sent with it (kept for Retry). */
  history: HistoryTurn[];
  answerText: string;
  sources: AnswerSource[];
  /** The `done` event, once the answer is complete; a turn without one is never sent as history. */
  done: AskDone | null;
  /** The sentences to mark ⚠ once the answer is complete (`done.unsupported`). */
  marks: UnsupportedSentence[];
  controller: AbortController | null;
  renderTimer: number | null;
  renderChild: Component | null;
  renderSeq: number;
  el: { root: HTMLElement; error: HTMLElement; banner: HTMLElement; answer: HTMLElement; note: HTMLElement; sources: HTMLElement };
}

/** A hit's meta line: where it is, then its relevance in words (with a tooltip), never the raw score. */
export function metaLine(parent: HTMLElement, cls: string, where: string, relevance: unknown): void {
  const el = h("span", { cls }, parent);
  if (where) el.appendChild(document.createTextNode(where));
  const words = relevanceText(relevance);
  if (!words) return;
  if (where) el.appendChild(document.createTextNode(" · "));
  h("span", { cls: `cairn-relevance cairn-relevance-${String(relevance)}`, text: words, title: relevanceHint(relevance) }, el);
}

export class AskPane {
  private turns: Turn[] = [];
  private conversationEl!: HTMLElement;
  private questionEl!: HTMLTextAreaElement;
  private askButton!: HTMLButtonElement;
  private stopButton!: HTMLButtonElement;
  private newButton!: HTMLButtonElement;

  constructor(private readonly ctx: AskContext, readonly pane: HTMLElement) {
    this.conversationEl = h("div", { cls: "cairn-conversation", "aria-live": "polite" }, pane);
    const form = h("form", { cls: "cairn-ask-form" }, pane);
    this.questionEl = h("textarea", { cls: "cairn-question", rows: 3, placeholder: "Ask your notes…", "aria-label": "Question" }, form);
    const buttons = h("div", { cls: "cairn-ask-buttons" }, form);
    this.askButton = h("button", { cls: "cairn-ask-button mod-cta", type: "submit", text: "Ask" }, buttons);
    this.stopButton = h("button", { cls: "cairn-stop-button", type: "button", text: "Stop" }, buttons);
    this.newButton = h("button", { cls: "cairn-new-conversation", type: "button", text: "New conversation" }, buttons);
    show(this.stopButton, false);
    show(this.newButton, false);
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
    this.stopButton.addEventListener("click", () => this.current()?.controller?.abort());
    this.newButton.addEventListener("click", () => this.newConversation());
  }

  focus(): void {
    this.questionEl.focus();
  }

  close(): void {
    for (const turn of this.turns) this.dispose(turn);
  }

  /** The turns kept as history for the next question: the finished ones, oldest first. */
  history(): HistoryTurn[] {
    return this.turns.filter((t) => t.done !== null).map((t) => ({ question: t.question, answer: t.answerText }));
  }

  /** Forget every turn: the next question starts a new conversation. */
  newConversation(): void {
    this.close();
    this.turns = [];
    clear(this.conversationEl);
    this.idle();
    show(this.newButton, false);
    this.questionEl.placeholder = "Ask your notes…";
    this.questionEl.value = "";
    this.questionEl.focus();
  }

  private current(): Turn | undefined {
    return this.turns[this.turns.length - 1];
  }

  private dispose(turn: Turn): void {
    turn.controller?.abort();
    turn.controller = null;
    if (turn.renderTimer !== null) window.clearTimeout(turn.renderTimer);
    turn.renderTimer = null;
    turn.renderChild?.unload();
    turn.renderChild = null;
  }

  /** Ask the question in the box as a new turn, with the finished turns before it as history. */
  async ask(): Promise<void> {
    const question = this.questionEl.value.trim();
    if (!question) return;
    const previous = this.current();
    if (previous?.controller) previous.controller.abort();
    const turn = this.addTurn(question, this.history());
    this.questionEl.value = "";
    this.questionEl.placeholder = "Ask a follow-up…";
    show(this.newButton, true);
    await this.run(turn);
  }

  private addTurn(question: string, history: HistoryTurn[]): Turn {
    const root = h("div", { cls: "cairn-turn", "data-turn": this.turns.length + 1 }, this.conversationEl);
    h("div", { cls: "cairn-turn-question", text: question }, root);
    const error = h("div", { cls: "cairn-error" }, root);
    const banner = h("div", { cls: "cairn-banner cairn-banner-ungrounded" }, root);
    const answer = h("div", { cls: "cairn-answer markdown-rendered" }, root);
    const note = h("div", { cls: "cairn-ask-note" }, root);
    const sources = h("div", { cls: "cairn-sources" }, root);
    show(error, false);
    show(banner, false);
    const turn: Turn = {
      question, history, answerText: "", sources: [], done: null, marks: [], controller: null, renderTimer: null, renderChild: null, renderSeq: 0,
      el: { root, error, banner, answer, note, sources },
    };
    answer.addEventListener("click", (ev) => {
      const a = (ev.target as HTMLElement | null)?.closest?.("a.cairn-cite") as HTMLAnchorElement | null;
      if (!a) return;
      ev.preventDefault();
      const source = turn.sources.find((s) => s.n === Number(a.dataset.n));
      if (source) void this.ctx.openTarget(targetOf(source));
    });
    this.turns.push(turn);
    root.scrollIntoView?.({ block: "nearest" });
    return turn;
  }

  private idle(): void {
    this.askButton.disabled = false;
    show(this.stopButton, false);
  }

  /** Stream the answer of `turn` into it (again, for Retry). */
  private async run(turn: Turn): Promise<void> {
    this.dispose(turn);
    const controller = new AbortController();
    turn.controller = controller;
    turn.answerText = "";
    turn.sources = [];
    turn.done = null;
    turn.marks = [];
    const el = turn.el;
    for (const box of [el.answer, el.sources, el.note]) clear(box);
    show(el.error, false);
    show(el.banner, false);
    el.banner.classList.remove("cairn-banner-weak", "cairn-banner-unsupported");
    el.answer.classList.remove("cairn-notfound");
    el.answer.classList.add("is-streaming");
    this.askButton.disabled = true;
    show(this.stopButton, true);
    let done: AskDone | null = null;
    const streamErrors: string[] = [];
    const live = () => controller === turn.controller && this.turns.includes(turn);
    try {
      done = await this.ctx.client().ask(
        turn.question,
        {
          onToken: (text) => {
            if (!live()) return;
            turn.answerText += text;
            this.scheduleRender(turn);
          },
          onReplace: (text) => {
            if (!live()) return;
            turn.answerText = text;
            this.scheduleRender(turn);
          },
          onSources: (sources) => {
            if (!live()) return;
            turn.sources = sources;
            this.renderSources(turn);
            this.scheduleRender(turn, true);
          },
          onStreamError: (e) => streamErrors.push(e.message),
        },
        { topK: this.ctx.topK(), tags: this.ctx.tags(), history: turn.history, signal: controller.signal },
      );
    } catch (err) {
      if (!live()) return;
      const e = toCairnError(err);
      if (e.kind === "aborted") h("span", { cls: "cairn-stopped", text: "Stopped." }, el.note);
      else this.ctx.showError(el.error, e, () => void this.run(turn));
    } finally {
      if (live()) {
        turn.controller = null;
        if (turn === this.current()) this.idle();
        el.answer.classList.remove("is-streaming");
      }
    }
    if (turn.controller !== null || !this.turns.includes(turn)) return; // retried, or the conversation was cleared
    if (turn.renderTimer !== null) {
      // No more tokens: the final render below replaces any pending one (it must not land after finishAnswer).
      window.clearTimeout(turn.renderTimer);
      turn.renderTimer = null;
    }
    turn.marks = done?.unsupported ?? [];
    await this.renderAnswer(turn);
    if (turn.controller !== null) return;
    if (streamErrors.length) {
      this.ctx.showError(el.error, new CairnError("server", streamErrors.join(" ")), () => void this.run(turn));
    }
    if (done) this.finishAnswer(turn, done);
  }

  private finishAnswer(turn: Turn, done: AskDone): void {
    turn.done = done;
    const el = turn.el;
    if (done.notFound) {
      clear(el.answer);
      el.answer.classList.add("cairn-notfound");
      h("div", { cls: "cairn-notfound-title", text: "Not found in your notes" }, el.answer);
      h("div", { cls: "cairn-notfound-text", text: turn.answerText.trim() || "I couldn't find this in your indexed notes." }, el.answer);
      h("div", {
        cls: "cairn-notfound-hint",
        text: this.ctx.tags().length ? "Nothing in the scope passed the relevance floor. Try other words, or widen the tag scope." : "Nothing in your notes passed the relevance floor. Try other words.",
      }, el.answer);
      clear(el.sources);
    } else if (done.weak) {
      clear(el.banner);
      el.banner.classList.add("cairn-banner-weak");
      h("strong", { text: "No clear answer in your notes. " }, el.banner);
      h("span", { text: "These are the closest passages, quoted as they are; no language model was asked. Check them before relying on them." }, el.banner);
      show(el.banner, true);
    } else if (done.unsupported?.length) {
      clear(el.banner);
      el.banner.classList.add("cairn-banner-unsupported");
      const one = done.unsupported.length === 1;
      h("strong", { text: "Not all of this answer is in your notes. " }, el.banner);
      h("span", {
        text: one
          ? "One sentence, marked ⚠, is not backed by a passage it cites: the language model may have made it up."
          : `${done.unsupported.length} sentences, marked ⚠, are not backed by a passage they cite: the language model may have made them up.`,
      }, el.banner);
      show(el.banner, true);
    } else if (!done.grounded) {
      clear(el.banner);
      h("strong", { text: "Built from your notes' own sentences. " }, el.banner);
      const why = done.fallback ?? "No language model wrote this answer (none is configured, or it did not answer).";
      h("span", { text: `${why} Each sentence is quoted from the cited note.` }, el.banner);
      show(el.banner, true);
    }
    renderCoverage(el.note, done.coverage);
    const secs = (done.elapsedMs / 1000).toFixed(1);
    h("span", { cls: "cairn-elapsed", text: `Answered in ${secs} s` }, el.note);
  }

  private scheduleRender(turn: Turn, now = false): void {
    if (turn.renderTimer !== null) {
      if (!now) return;
      window.clearTimeout(turn.renderTimer);
    }
    turn.renderTimer = window.setTimeout(() => {
      turn.renderTimer = null;
      void this.renderAnswer(turn);
    }, now ? 0 : RENDER_EVERY_MS);
  }

  /** Render the answer so far as Markdown, then turn its `[n]` into links (only known ones once sources came). */
  private async renderAnswer(turn: Turn): Promise<void> {
    const seq = ++turn.renderSeq;
    const child = new Component();
    child.load();
    const target = document.createElement("div");
    const { text, marked } = withMarks(turn.answerText, turn.marks);
    await MarkdownRenderer.render(this.ctx.app, text, target, "", child);
    if (seq !== turn.renderSeq || this.ctx.isClosed() || !this.turns.includes(turn)) {
      child.unload();
      return;
    }
    placeMarks(target, marked);
    const known = turn.sources.length ? new Set(turn.sources.map((s) => s.n)) : undefined;
    for (const a of linkCitations(target, known)) {
      const source = turn.sources.find((s) => s.n === Number(a.dataset.n));
      a.title = source ? `${sourceLabel(source)} ${locationLabel(source)}`.trim() : "source arriving…";
      if (!source) a.classList.add("is-pending");
    }
    turn.renderChild?.unload();
    turn.renderChild = child;
    clear(turn.el.answer);
    while (target.firstChild) turn.el.answer.appendChild(target.firstChild);
  }

  /** The sources the answer cites under "Sources", then the others it was given under "Also retrieved". */
  private renderSources(turn: Turn): void {
    const box = turn.el.sources;
    clear(box);
    if (!turn.sources.length) return;
    const { cited, also } = groupSources(turn.sources);
    for (const [title, group, cls] of [["Sources", cited, ""], ["Also retrieved", also, " cairn-source-list-also"]] as const) {
      if (!group.length) continue;
      h("div", { cls: "cairn-section-title", text: title }, box);
      const list = h("ol", { cls: `cairn-source-list${cls}` }, box);
      for (const s of group) {
        const li = h("li", { cls: "cairn-source", "data-n": s.n }, list);
        h("span", { cls: "cairn-source-n", text: `[${s.n}]` }, li);
        const link = h("a", { cls: "cairn-source-link", href: "#", text: sourceLabel(s) }, li);
        link.addEventListener("click", (ev) => {
          ev.preventDefault();
          void this.ctx.openTarget(targetOf(s));
        });
        metaLine(li, "cairn-source-meta", locationLabel(s), s.relevance);
      }
    }
  }
}
