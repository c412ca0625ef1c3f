/**
 * Shapes of the Cairn daemon's HTTP API (docs/design.md, "Interfaces" → HTTP; daemon/cairn/openapi.json). JSON is camelCase.
 */

import type { Relevance } from "./relevance";

/**
 * One ranked chunk of `GET /search`, or (a search without words, `recent: true`) one recently modified note with its
 * first passage. `lines` are 1-based inclusive line numbers of the chunk in its note.
 */
export interface SearchHit {
  filePath: string;
  /** Heading path joined with ` › ` (e.g. `Tomatoes › Care`), or `page N` for a PDF. */
  symbol: string;
  /** The fused ranking score: orders the results, means nothing to a reader (absent from recent notes). */
  score?: number;
  /** The note's title (recent notes). */
  title?: string;
  /** When the note's file was last modified, unix seconds (recent notes). */
  modifiedAt?: number;
  /** How relevant the hit is, in a word (see relevance.ts); absent from a daemon older than the field. */
  relevance?: Relevance;
  snippet: string;
  cosine?: number;
  tags?: string[];
  kind?: string;
  lines?: [number, number];
  page?: number;
}

/**
 * How much of the index a result was drawn from, in notes: `notes` indexed (searchable by their words), of which
 * `embedded` have every passage's vector and `pending` not yet (found by their words only, not by meaning);
 * `refining`: embedded notes whose sentence vectors are still to come.
 */
export interface Coverage {
  notes: number;
  embedded: number;
  pending: number;
  refining?: number;
}

export interface SearchResponse {
  results: SearchHit[];
  /** True when `results` are the most recently modified notes (a search without words). */
  recent?: boolean;
  elapsedMs?: number;
  /** Absent from a daemon older than the field. */
  coverage?: Coverage;
}

/** One numbered source of an answer: exactly a chunk that was in the prompt; `n` is the `[n]` it is cited by. */
export interface AnswerSource {
  n: number;
  /** The answer's text cites `[n]`; the others were in the context and are listed under "Also retrieved". */
  cited?: boolean;
  filePath: string;
  symbol: string;
  score: number;
  relevance?: Relevance;
  snippet?: string;
  lines?: [number, number];
  page?: number;
}

/** One earlier turn of a conversation, as `POST /ask` takes it in `history`. */
export interface HistoryTurn {
  question: string;
  /** The answer's text as it was shown, `[n]` citations and all (the daemon removes them). */
  answer: string;
}

/** A sentence of a model's answer that no passage it cites supports: its text as written, the `[n]` it cites. */
export interface UnsupportedSentence {
  text: string;
  cites: number[];
}

/**
 * The `done` event of `POST /ask`. `grounded: true` → a model wrote it and every sentence is supported by a passage
 * it cites; `grounded: false` → built from the notes' own sentences (no model), or a model's answer with
 * `unsupported` sentences.
 */
export interface AskDone {
  grounded: boolean;
  notFound: boolean;
  /** Wall time from the request arriving to `done`, in milliseconds. */
  elapsedMs: number;
  removedCitations?: number;
  coverage?: Coverage;
  /** Why the model's answer was replaced by one built from the passages (only when it was). */
  fallback?: string;
  /** True when the evidence was weak: the answer gives the closest passages and no model was asked. */
  weak?: boolean;
  /** The model's sentences that no passage they cite supports, in order (only when there are some). */
  unsupported?: UnsupportedSentence[];
}

/** `{code, message}` of an `error` event, or of an HTTP error body `{"error": {...}}`. */
export interface ApiErrorBody {
  code: string;
  message: string;
}

export interface RelatedLink {
  target: string;
  targetPath: string | null;
  heading?: string | null;
  blockId?: string | null;
  alias?: string | null;
  isEmbed?: boolean;
  line?: number | null;
}

export interface RelatedResponse {
  filePath?: string;
  links: RelatedLink[];
  backlinks: { filePath: string; line?: number | null }[];
  similar: { filePath: string; title?: string; score: number; relevance?: Relevance }[];
}

export interface TagCount {
  tag: string;
  count: number;
}

export interface TagsResponse {
  tags: TagCount[];
}

/** `GET /index/stats`. `lastIngestedAt` is seconds since the epoch (or null before the first index). */
export interface IndexStats {
  notes: number;
  chunks: number;
  vectors: number;
  pending: number;
  lastIngestedAt: number | null;
  watching?: boolean;
  paused?: boolean;
  indexing?: boolean;
  errors?: { filePath: string; reason: string }[];
}

/** A `progress` event of `GET /events`: `done` of `total` items in `phase` (`scan`, `index`, `embed`). */
export interface ProgressEvent {
  phase: string;
  done: number;
  total: number;
}
