// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import {
  headingOf, highlightRuns, locationLabel, sourceLabel, splitCitations, targetOf,
} from "../src/citations";
import { linkCitations } from "../src/dom";

const join = (parts: ReturnType<typeof splitCitations>) => parts.map((p) => (typeof p === "string" ? p : p.text)).join("");

describe("splitCitations", () => {
  it("finds each [n] and keeps the text around it", () => {
    const text = "Plant out in mid-May [1], 45 cm apart [2][3].";
    const parts = splitCitations(text);
    expect(parts).toEqual(["Plant out in mid-May ", { n: 1, text: "[1]" }, ", 45 cm apart ", { n: 2, text: "[2]" }, { n: 3, text: "[3]" }, "."]);
    expect(join(parts)).toBe(text);
  });

  it("links only numbers that have a source once the sources are known", () => {
    expect(splitCitations("a [1] b [9]", new Set([1]))).toEqual(["a ", { n: 1, text: "[1]" }, " b [9]"]);
  });

  it("leaves wiki links, Markdown links and [0] alone", () => {
    for (const text of ["see [[1]] now", "a [1](https://x) link", "index [0]"]) {
      expect(splitCitations(text)).toEqual([text]);
    }
  });
});

describe("linkCitations on rendered Markdown", () => {
  it("turns [n] in text into citation links but not inside code or existing links", () => {
    const root = document.createElement("div");
    root.innerHTML =
      "<p>Sow at 20 °C [1]. Use <code>arr[2]</code> and <a href='x'>note [3]</a>.</p><pre><code>x[4]</code></pre><ul><li>Water daily [2]</li></ul>";
    const links = linkCitations(root);
    expect(links.map((a) => a.dataset.n)).toEqual(["1", "2"]);
    expect(root.querySelector("code")?.textContent).toBe("arr[2]");
    expect(root.querySelector("pre")?.textContent).toBe("x[4]");
    expect(root.textContent).toBe("Sow at 20 °C [1]. Use arr[2] and note [3].x[4]Water daily [2]");
    expect(links[0].classList.contains("cairn-cite")).toBe(true);
    expect(links[0].textContent).toBe("[1]");
  });

  it("with known sources, an unknown number stays plain text", () => {
    const root = document.createElement("div");
    root.innerHTML = "<p>One [1], two [2].</p>";
    expect(linkCitations(root, new Set([2])).map((a) => a.textContent)).toEqual(["[2]"]);
  });
});

describe("where a citation opens", () => {
  it("opens a chunk with lines at its first line (0-based for the editor)", () => {
    expect(targetOf({ filePath: "Garden/Tomatoes.md", symbol: "Tomatoes › Care", lines: [24, 32] })).toEqual({
      path: "Garden/Tomatoes.md",
      line: 23,
    });
  });

  it("opens a PDF chunk at its page, and a chunk without lines at its deepest heading", () => {
    expect(targetOf({ filePath: "Docs/manual.pdf", symbol: "page 3", page: 3 })).toEqual({ path: "Docs/manual.pdf", subpath: "#page=3" });
    expect(targetOf({ filePath: "Garden/Tomatoes.md", symbol: "Tomatoes › Care" })).toEqual({ path: "Garden/Tomatoes.md", subpath: "#Care" });
    expect(targetOf({ filePath: "Home.md", symbol: "" })).toEqual({ path: "Home.md" });
    expect(headingOf("page 12")).toBeUndefined();
  });

  it("labels a source as filePath › symbol with its place", () => {
    expect(sourceLabel({ filePath: "Garden/Tomatoes.md", symbol: "Tomatoes › Care" })).toBe("Garden/Tomatoes.md › Tomatoes › Care");
    expect(sourceLabel({ filePath: "Home.md", symbol: "" })).toBe("Home.md");
    expect(locationLabel({ lines: [24, 32] })).toBe("lines 24–32");
    expect(locationLabel({ lines: [5, 5] })).toBe("line 5");
    expect(locationLabel({ page: 3 })).toBe("p. 3");
  });
});

describe("highlightRuns", () => {
  it("marks the query's words in a snippet, whole-word starts, case-insensitive", () => {
    const runs = highlightRuns("Tomato sauce from tomatoes; atomato", "tomato SAUCE");
    expect(runs.filter((r) => r.match).map((r) => r.text)).toEqual(["Tomato", "sauce", "tomato"]);
    expect(runs.map((r) => r.text).join("")).toBe("Tomato sauce from tomatoes; atomato");
  });
});
