import { describe, expect, it } from "vitest";
import { findDaemon, pidAlive, vaultIdOf, verifyDaemon } from "../src/discovery";

/** /health as a daemon serving the vault with this id answers it. */
const healthOf = (vaultId?: string) => async () => ({ status: "ok", version: "0.1.0", vaultId, store: {}, embedder: {} });

describe("whose daemon", () => {
  it("computes a vault's id as the daemon does (sha256 of the NFC path, 16 hex)", async () => {
    // daemon/cairn/config.py vault_id_of(Path("/v/A")) and of "/v/Café" (NFC)
    expect(await vaultIdOf("/v/A")).toBe("4d246c31c778fd53");
    expect(await vaultIdOf("/v/A/")).toBe("4d246c31c778fd53");
    expect(await vaultIdOf("/v/Cafe\u0301")).toBe("ba0b29b25e17c74a");
  });

  it("uses a daemon only when its /health names this vault", async () => {
    expect(await verifyDaemon("http://127.0.0.1:4001", "/v/A", healthOf("4d246c31c778fd53"))).toEqual({ kind: "ok" });
    expect(await verifyDaemon("http://127.0.0.1:4001", "/v/A", healthOf("ba0b29b25e17c74a"))).toEqual({
      kind: "elsewhere",
      message: "The Cairn daemon at http://127.0.0.1:4001 serves another vault.",
    });
    const other = await verifyDaemon("http://127.0.0.1:4001", "/v/A", healthOf(undefined));
    expect(other.kind).toBe("elsewhere");
    expect(await verifyDaemon("http://127.0.0.1:4001", "/v/A", async () => null)).toEqual({ kind: "offline" });
  });

  it("with the URL set by hand, still checks whose daemon answers there", async () => {
    const asked: string[] = [];
    const found = await findDaemon("/v/A", { daemonUrl: "http://127.0.0.1:4001/" }, async (url) => {
      asked.push(url);
      return { vaultId: "ba0b29b25e17c74a" };
    });
    expect(asked).toEqual(["http://127.0.0.1:4001/health"]);
    expect(found.kind).toBe("elsewhere");
  });

  it("tells a running process from one that is gone", () => {
    expect(pidAlive(process.pid)).toBe(true);
    expect(pidAlive(undefined)).toBe(false);
    expect(pidAlive(2 ** 22 + 12345)).toBe(false); // above Linux's pid_max
  });
});
