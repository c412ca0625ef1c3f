/**
 * The client of the Cairn daemon's HTTP API (docs/design.md, "Interfaces" → HTTP), over `fetch`.
 *
 * Every route but `/health` carries `Authorization: Bearer <token>`; the token never goes into a URL,
 * an error message or a log line. Inside Obsidian the page's origin is `app://obsidian.md`, the one
 * origin the daemon's CORS allowlist accepts by default.
 *
 * Failures are thrown as {@link CairnError} (see errors.ts for the kinds).
 */

import { CairnError, httpError, isAbort, NO_DAEMON_FOUND, NO_TOKEN } from "./errors";
import { readSse } from "./sse";
import type {
  AnswerSource, ApiErrorBody, AskDone, HistoryTurn, IndexStats, ProgressEvent, RelatedResponse, SearchResponse, TagsResponse,
} from "./types";

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

export interface ClientOptions {
  /** e.g. `http://127.0.0.1:27183` (a trailing slash is ignored). */
  baseUrl: string;
  token: string;
  fetch?: FetchLike;
  /**
   * Asked when `fetch` fails without an answer: does the daemon answer `GET /health` by another way
   * (Obsidian's `requestUrl`, which is not subject to CORS)? `true` → the daemon runs but the browser
   * refused the answer (an Origin problem); `false` → nothing is listening. Without it, every such
   * failure counts as "not running".
   */
  probe?: (healthUrl: string) => Promise<boolean>;
  /**
   * Asked before a request is sent (and again, `again` true, after a 401): throws a CairnError unless the daemon
   * at `baseUrl` serves this vault (`elsewhere`: another vault's daemon or another program; `offline`). So the
   * token goes only to this vault's daemon, and another vault's notes are never shown.
   */
  check?: (baseUrl: string, again: boolean) => Promise<void>;
}

/** What {@link CairnClient.ask} reports as the answer streams in. */
export interface AskHandlers {
  /** A piece of answer text, in order; concatenating them gives the answer. */
  onToken?: (text: string) => void;
  /** The tokens so far are not the answer: `text` is, whole (the model's answer was unusable; `reason` says why). */
  onReplace?: (text: string, reason: string) => void;
  /** The numbered sources (exactly the chunks in the prompt); sent once, after the last token. */
  onSources?: (sources: AnswerSource[]) => void;
  /** An `error` event inside the stream (the model stopped part-way, the daemon is shutting down...). */
  onStreamError?: (error: ApiErrorBody) => void;
}

export interface AskOptions {
  topK?: number;
  tags?: string[];
  /** The conversation's earlier turns, oldest first: a follow-up is retrieved with them (cut to the daemon's limits). */
  history?: HistoryTurn[];
  signal?: AbortSignal;
}

/** At most this many earlier turns go with a question (the daemon's limit, `history` in openapi.json). */
export const HISTORY_TURNS = 6;
/** An earlier answer is cut to this many characters (the daemon's limit). */
export const HISTORY_ANSWER_CHARS = 4000;

/** `history` as the daemon accepts it: the last {@link HISTORY_TURNS} turns, answers cut to {@link HISTORY_ANSWER_CHARS}. */
export function historyBody(turns: readonly HistoryTurn[]): HistoryTurn[] {
  return turns.slice(-HISTORY_TURNS).map((t) => ({ question: t.question, answer: t.answer.slice(0, HISTORY_ANSWER_CHARS) }));
}

/** Handlers for `GET /events` (index progress). */
export interface EventHandlers {
  /** The stream is open (the daemon answered). */
  onOpen?: () => void;
  onProgress?: (p: ProgressEvent) => void;
  /** An index run finished (`indexed`), or notes were removed (`removed`). */
  onIndexed?: (name: string, data: unknown) => void;
  onIndexError?: (data: unknown) => void;
}

export class CairnClient {
  readonly baseUrl: string;
  private readonly token: string;
  private readonly fetchImpl: FetchLike;
  private readonly probe?: (healthUrl: string) => Promise<boolean>;
  private readonly check?: (baseUrl: string, again: boolean) => Promise<void>;

  constructor(opts: ClientOptions) {
    this.baseUrl = opts.baseUrl.trim().replace(/\/+$/, "");
    this.token = opts.token.trim();
    this.fetchImpl = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.probe = opts.probe;
    this.check = opts.check;
  }

  /** `GET /search?q=&topK=&tag=...` → ranked chunks; `q` empty → the most recently modified notes (`recent: true`). */
  search(q: string, opts: { topK?: number; tags?: string[]; signal?: AbortSignal } = {}): Promise<SearchResponse> {
    const params = new URLSearchParams(q.trim() ? { q } : {});
    if (opts.topK) params.set("topK", String(opts.topK));
    for (const tag of opts.tags ?? []) params.append("tag", tag);
    return this.getJson<SearchResponse>(`/search?${params}`, opts.signal);
  }

  /** `GET /related?path=&limit=` → links, backlinks and semantically similar notes. */
  related(path: string, limit = 10, signal?: AbortSignal): Promise<RelatedResponse> {
    const params = new URLSearchParams({ path, limit: String(limit) });
    return this.getJson<RelatedResponse>(`/related?${params}`, signal);
  }

  /** `GET /tags` → every tag with its note count. */
  tags(signal?: AbortSignal): Promise<TagsResponse> {
    return this.getJson<TagsResponse>("/tags", signal);
  }

  /** `GET /index/stats` → counts and freshness. */
  stats(signal?: AbortSignal): Promise<IndexStats> {
    return this.getJson<IndexStats>("/index/stats", signal);
  }

  /**
   * `POST /ask`: stream the answer. Resolves with the `done` event; rejects with a CairnError when the
   * request fails, or the stream ends without `done` (kind `network`), or `signal` aborts (kind `aborted`).
   */
  async ask(question: string, handlers: AskHandlers, opts: AskOptions = {}): Promise<AskDone> {
    const body: Record<string, unknown> = { question };
    if (opts.topK) body.topK = opts.topK;
    if (opts.tags && opts.tags.length) body.tags = opts.tags;
    if (opts.history && opts.history.length) body.history = historyBody(opts.history);
    const response = await this.request("/ask", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal: opts.signal,
    });
    if (!response.body) throw new CairnError("network", "The daemon sent an empty answer stream.");
    try {
      for await (const ev of readSse(response.body)) {
        const data = parseData(ev.data);
        if (ev.event === "token") {
          const text = (data as { text?: unknown })?.text;
          if (typeof text === "string") handlers.onToken?.(text);
        } else if (ev.event === "replace") {
          const r = (data ?? {}) as { text?: unknown; reason?: unknown };
          if (typeof r.text === "string") handlers.onReplace?.(r.text, typeof r.reason === "string" ? r.reason : "");
        } else if (ev.event === "sources") {
          handlers.onSources?.(Array.isArray(data) ? (data as AnswerSource[]) : []);
        } else if (ev.event === "error") {
          const e = (data ?? {}) as Partial<ApiErrorBody>;
          handlers.onStreamError?.({ code: String(e.code ?? "error"), message: String(e.message ?? "The answer failed.") });
        } else if (ev.event === "done") {
          return data as AskDone;
        }
      }
    } catch (err) {
      if (isAbort(err) || opts.signal?.aborted) throw new CairnError("aborted", "Stopped.");
      throw new CairnError("network", "The connection to Cairn dropped while the answer was streaming.");
    }
    if (opts.signal?.aborted) throw new CairnError("aborted", "Stopped.");
    throw new CairnError("network", "The answer stream ended before it was complete.");
  }

  /**
   * `GET /events`: index progress until `signal` aborts or the connection ends (then it resolves;
   * the caller reconnects). Rejects with a CairnError when the request itself fails.
   */
  async events(handlers: EventHandlers, signal?: AbortSignal): Promise<void> {
    const response = await this.request("/events", { method: "GET", headers: { Accept: "text/event-stream" }, signal });
    handlers.onOpen?.();
    if (!response.body) return;
    try {
      for await (const ev of readSse(response.body)) {
        const data = parseData(ev.data);
        if (ev.event === "progress") handlers.onProgress?.(data as ProgressEvent);
        else if (ev.event === "indexed" || ev.event === "removed") handlers.onIndexed?.(ev.event, data);
        else if (ev.event === "error") handlers.onIndexError?.(data);
      }
    } catch (err) {
      if (isAbort(err) || signal?.aborted) return;
      throw new CairnError("network", "The index event stream dropped.");
    }
  }

  private async getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
    const response = await this.request(path, { method: "GET", headers: { Accept: "application/json" }, signal });
    try {
      return (await response.json()) as T;
    } catch (err) {
      if (isAbort(err) || signal?.aborted) throw new CairnError("aborted", "Stopped.");
      throw new CairnError("network", `The daemon's answer to ${path.split("?")[0]} was not JSON.`);
    }
  }

  /**
   * One authorised request to this vault's daemon; no daemon URL, or one that is not this vault's → offline or
   * elsewhere (nothing sent); non-2xx → the matching CairnError; no answer at all → offline/blocked.
   */
  private async request(path: string, init: RequestInit & { headers: Record<string, string> }): Promise<Response> {
    if (!this.token) throw new CairnError("no-token", NO_TOKEN);
    if (!this.baseUrl) throw new CairnError("offline", NO_DAEMON_FOUND);
    if (this.check) await this.check(this.baseUrl, false);
    let response: Response;
    try {
      response = await this.fetchImpl(this.baseUrl + path, {
        ...init,
        headers: { ...init.headers, Authorization: `Bearer ${this.token}` },
        cache: "no-store",
      });
    } catch (err) {
      if (isAbort(err) || init.signal?.aborted) throw new CairnError("aborted", "Stopped.");
      throw await this.unreachable();
    }
    if (!response.ok) {
      let text = "";
      try {
        text = await response.text();
      } catch {
        /* the body is lost; the status says enough */
      }
      if (response.status === 401 && this.check) await this.check(this.baseUrl, true); // moved? another vault's daemon
      throw httpError(response.status, text);
    }
    return response;
  }

  /** `fetch` got no answer: tell "not running" from "running but refused by the browser" when we can. */
  private async unreachable(): Promise<CairnError> {
    if (this.probe) {
      let answers = false;
      try {
        answers = await this.probe(this.baseUrl + "/health");
      } catch {
        answers = false;
      }
      if (answers) return new CairnError("blocked", "The daemon answers /health but the browser refused its response.");
    }
    return new CairnError("offline", "Nothing answered.");
  }
}

function parseData(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return null;
  }
}
