/**
 * Errors the sidebar shows, in words an owner understands.
 *
 * Every failure of a call to the daemon becomes one {@link CairnError} with a `kind`; the view
 * renders {@link describeError} of it inline — never a blank pane, never the token.
 */

export type ErrorKind =
  /** Nothing answers at the daemon URL (connection refused / no route), or no daemon names this vault: not running. */
  | "offline"
  /** What answers is another vault's daemon, or not a Cairn daemon: this vault's daemon is not running. */
  | "elsewhere"
  /** The daemon answers (its /health does) but the browser refused the response: an Origin/CORS problem. */
  | "blocked"
  /** No token in the settings yet. */
  | "no-token"
  /** 401: the token is wrong or was rotated. */
  | "unauthorized"
  /** 429: too many wrong tokens; wait. */
  | "throttled"
  /** 5xx from the daemon (its message is shown). */
  | "server"
  /** Any other 4xx (bad input, 404 note not indexed, 403 origin...). */
  | "request"
  /** The connection dropped or the stream ended early. */
  | "network"
  /** The owner pressed Stop (not shown as an error). */
  | "aborted";

export class CairnError extends Error {
  /** The HTTP status when the daemon answered, else undefined. */
  readonly status?: number;
  /** The daemon's stable error code (`unauthorized`, `not_found`, ...) when it sent one. */
  readonly code?: string;

  constructor(readonly kind: ErrorKind, message: string, opts: { status?: number; code?: string } = {}) {
    super(message);
    this.name = "CairnError";
    this.status = opts.status;
    this.code = opts.code;
  }
}

export const NOT_RUNNING = "Cairn isn't running for this vault — start it with `cairn serve --vault <this vault's folder>` or from the tray.";
export const TOKEN_REJECTED = "Cairn rejected the token — run `cairn plugin install --vault <this vault's folder>` to give this vault its token.";
export const NO_TOKEN = "No Cairn token yet — run `cairn plugin install --vault <this vault's folder>` to give this vault its token.";
/** The detail under {@link NOT_RUNNING} when no daemon's record names this vault. */
export const NO_DAEMON_FOUND = "No running Cairn daemon says it serves this vault.";

/** What the view shows for an error: a headline, an optional detail line, and whether a Retry button helps. */
export interface ErrorDisplay {
  kind: ErrorKind;
  title: string;
  detail?: string;
  retry: boolean;
}

/** Turn any thrown value into what the view shows. Never includes request headers (so never the token). */
export function describeError(err: unknown, daemonUrl?: string): ErrorDisplay {
  const e = toCairnError(err);
  switch (e.kind) {
    case "offline":
      return { kind: e.kind, title: NOT_RUNNING, detail: daemonUrl ? `Nothing answered at ${daemonUrl}.` : NO_DAEMON_FOUND, retry: true };
    case "elsewhere":
      return { kind: e.kind, title: NOT_RUNNING, detail: e.message, retry: true };
    case "blocked":
      return {
        kind: e.kind,
        title: "Cairn is running but refused this app's requests.",
        detail: "Its allowed origins (cors_origins in Cairn's config.toml) must include app://obsidian.md.",
        retry: true,
      };
    case "no-token":
      return { kind: e.kind, title: NO_TOKEN, retry: true };
    case "unauthorized":
      return { kind: e.kind, title: TOKEN_REJECTED, retry: true };
    case "throttled":
      return { kind: e.kind, title: "Too many wrong tokens — wait a few seconds, then retry.", detail: e.message, retry: true };
    case "server":
      return { kind: e.kind, title: `Cairn hit a problem${e.status ? ` (HTTP ${e.status})` : ""}.`, detail: e.message, retry: true };
    case "request":
      return { kind: e.kind, title: e.message, retry: false };
    case "network":
      return { kind: e.kind, title: "Lost the connection to Cairn.", detail: e.message, retry: true };
    case "aborted":
      return { kind: e.kind, title: "Stopped.", retry: false };
  }
}

/** Normalise anything thrown (a fetch `TypeError`, an `AbortError`, a CairnError) into a CairnError. */
export function toCairnError(err: unknown): CairnError {
  if (err instanceof CairnError) return err;
  if (isAbort(err)) return new CairnError("aborted", "Stopped.");
  const message = err instanceof Error ? err.message : String(err);
  return new CairnError("network", message || "The request failed.");
}

export function isAbort(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { name?: string }).name === "AbortError";
}

/**
 * The error for a non-2xx answer: `status` and the body text (the daemon's `{"error": {code, message}}`,
 * or anything else a proxy might send).
 */
export function httpError(status: number, bodyText: string): CairnError {
  let code: string | undefined;
  let message = "";
  try {
    const body = JSON.parse(bodyText) as { error?: { code?: unknown; message?: unknown } };
    if (body && typeof body.error === "object" && body.error) {
      if (typeof body.error.code === "string") code = body.error.code;
      if (typeof body.error.message === "string") message = body.error.message;
    }
  } catch {
    /* not JSON */
  }
  if (!message) message = bodyText.trim().slice(0, 300) || `HTTP ${status}`;
  if (status === 401) return new CairnError("unauthorized", TOKEN_REJECTED, { status, code });
  if (status === 429) return new CairnError("throttled", message, { status, code });
  if (status >= 500) return new CairnError("server", message, { status, code });
  return new CairnError("request", message, { status, code });
}
