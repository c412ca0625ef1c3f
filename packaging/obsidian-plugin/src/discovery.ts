/**
 * Finding this vault's daemon, and believing it only once it proves it serves this vault (docs/design.md,
 * "Contract" → Several vaults). The records are read with Node's fs, as Obsidian's desktop app allows.
 *
 * 1. Where: the URL in the settings, else the record this vault's daemon writes in its data folder (settings.ts),
 *    skipped when its process is gone (a daemon killed with kill -9 leaves its record). Never the default port
 *    by default: another vault's daemon may hold it.
 * 2. Whose: `GET /health` there must name this vault's id (`vaultId`: 16 hex digits of SHA-256 over the vault's
 *    resolved path, NFC, as UTF-8, which the daemon computes from the vault it serves:
 *    daemon/cairn/config.py `vault_id_of`). Another vault's daemon, or another program on the port a stale record
 *    names, is refused before the token is sent, and the sidebar says Cairn isn't running for this vault.
 */

import { effectiveUrl, isServiceFileName, pickServiceUrl, serviceFileCandidates, serviceInfoFromJson, vaultKey } from "./settings";
import type { CairnSettings, ServiceInfo } from "./settings";

/** What `GET /health` gave (its JSON), or `null` when nothing answered there. */
export type HealthGetter = (healthUrl: string) => Promise<unknown>;

/** Whether a daemon URL is this vault's daemon: `ok`, nothing there (`offline`), or not this vault's (`elsewhere`). */
export type DaemonCheck = { kind: "ok" } | { kind: "offline" } | { kind: "elsewhere"; message: string };

/** Where this vault's daemon is: its URL and whether it proved it is this vault's; `url` is "" when none is known. */
export type FoundDaemon = DaemonCheck & { url: string };

/** Node's modules inside Obsidian's desktop app (and in Node itself); undefined elsewhere. */
function node(): { fs: typeof import("fs"); os: typeof import("os"); path: typeof import("path") } | undefined {
  try {
    /* eslint-disable @typescript-eslint/no-var-requires */
    return { fs: require("fs"), os: require("os"), path: require("path") };
  } catch {
    return undefined;
  }
}

/** A vault's id as its daemon computes it (16 hex digits), with Web Crypto; undefined where there is none. */
export async function vaultIdOf(vault: string): Promise<string | undefined> {
  const subtle = (globalThis as { crypto?: Crypto }).crypto?.subtle;
  if (!subtle) return undefined;
  const digest = new Uint8Array(await subtle.digest("SHA-256", new TextEncoder().encode(vaultKey(vault))));
  return Array.from(digest.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Whether process `pid` exists (signal 0; another user's process counts). A record without a pid is not believed. */
export function pidAlive(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  const proc = (globalThis as { process?: { kill?: (pid: number, signal: number) => boolean } }).process;
  if (typeof proc?.kill !== "function") return true; // cannot tell here: /health decides
  try {
    proc.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as { code?: string }).code === "EPERM";
  }
}

/**
 * The URL the daemon of `vault` advertises in its data folder (`service-<index>.json`, or `service.json`), when
 * readable and its process still runs (desktop only); see {@link pickServiceUrl}. Undefined when there is no such
 * record, it is unreadable or stale, or its URL is not a loopback http URL.
 */
export function discoverServiceUrl(vault?: string): string | undefined {
  const mods = node();
  const proc = (globalThis as { process?: { platform: string; env: Record<string, string | undefined> } }).process;
  if (!mods || !proc) return undefined;
  const { fs, os, path } = mods;
  try {
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
      const url = pickServiceUrl(records, vault, pidAlive);
      if (url) return url;
    }
  } catch {
    /* not the desktop app */
  }
  return undefined;
}

/**
 * Is the daemon at `url` the one serving `vault`? Its `/health` (no token) must name the vault's id. Without a
 * vault path or Web Crypto (not the desktop app) there is nothing to compare, and a daemon that answers is used.
 */
export async function verifyDaemon(url: string, vault: string | undefined, getHealth: HealthGetter): Promise<DaemonCheck> {
  const health = await getHealth(url + "/health");
  if (health === null || health === undefined) return { kind: "offline" };
  const want = vault === undefined ? undefined : await vaultIdOf(vault);
  if (want === undefined) return { kind: "ok" };
  const said = (health as { vaultId?: unknown }).vaultId;
  if (said === want) return { kind: "ok" };
  return {
    kind: "elsewhere",
    message:
      typeof said === "string"
        ? `The Cairn daemon at ${url} serves another vault.`
        : `What answers at ${url} does not say it serves this vault (another program, or an older Cairn).`,
  };
}

/** `GET <url>` with `fetch` → its JSON, or null when nothing (or nothing JSON) answers. */
export async function fetchHealth(healthUrl: string): Promise<unknown> {
  try {
    const res = await globalThis.fetch(healthUrl, { cache: "no-store" });
    return res.ok ? await res.json() : null;
  } catch {
    return null;
  }
}

/**
 * This vault's daemon: the URL in `settings`, else the one its record advertises, checked by {@link verifyDaemon}.
 * `{kind: "offline", url: ""}` when no record names this vault (or its process is gone).
 */
export async function findDaemon(
  vault: string | undefined, settings: Pick<CairnSettings, "daemonUrl">, getHealth: HealthGetter = fetchHealth,
): Promise<FoundDaemon> {
  const url = effectiveUrl(settings, settings.daemonUrl.trim() ? undefined : discoverServiceUrl(vault));
  if (!url) return { kind: "offline", url };
  return { ...(await verifyDaemon(url, vault, getHealth)), url };
}
