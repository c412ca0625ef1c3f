// Unit tests run in Node; the view's tests run in happy-dom with `obsidian` resolved to the same
// stand-in the end-to-end harness uses (harness/obsidian-stub.js, wrapped by test/obsidian-shim.ts).
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  resolve: {
    alias: { obsidian: fileURLToPath(new URL("./test/obsidian-shim.ts", import.meta.url)) },
  },
  test: {
    include: ["test/**/*.test.ts"],
  },
});
