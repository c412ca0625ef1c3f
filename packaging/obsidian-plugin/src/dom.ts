/**
 * Small DOM helpers (plain DOM, so the view also runs in the test harness without Obsidian's
 * HTMLElement extensions), and the citation linker that works on rendered Markdown.
 */

import { splitCitations } from "./citations";

type Attrs = Record<string, string | number | boolean | undefined>;

/** `h("div", {cls: "a b", text: "hi", title: "x"}, parent)` → the new element, appended to `parent`. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs & { cls?: string; text?: string } = {},
  parent?: HTMLElement,
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) continue;
    if (key === "cls") el.className = String(value);
    else if (key === "text") el.textContent = String(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  if (parent) parent.appendChild(el);
  return el;
}

export function clear(el: HTMLElement): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

export function show(el: HTMLElement, visible: boolean): void {
  el.hidden = !visible;
}

/**
 * Replace every `[n]` in the text of `root` (outside `code`, `pre` and existing links) with an
 * `<a class="cairn-cite" data-n="n">[n]</a>`. With `known`, only those numbers become links.
 * Returns the links made, in document order.
 */
export function linkCitations(root: HTMLElement, known?: ReadonlySet<number>): HTMLAnchorElement[] {
  const texts: Text[] = [];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode(node) {
      for (let p = node.parentElement; p && p !== root; p = p.parentElement) {
        const tag = p.tagName;
        if (tag === "CODE" || tag === "PRE" || tag === "A") return NodeFilter.FILTER_REJECT;
      }
      return /\[\d{1,3}\]/.test(node.nodeValue ?? "") ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_SKIP;
    },
  });
  for (let n = walker.nextNode(); n; n = walker.nextNode()) texts.push(n as Text);
  const links: HTMLAnchorElement[] = [];
  for (const node of texts) {
    const parts = splitCitations(node.nodeValue ?? "", known);
    if (parts.every((p) => typeof p === "string")) continue;
    const frag = document.createDocumentFragment();
    for (const part of parts) {
      if (typeof part === "string") {
        frag.appendChild(document.createTextNode(part));
      } else {
        const a = h("a", { cls: "cairn-cite", href: "#", "data-n": part.n, text: part.text });
        links.push(a);
        frag.appendChild(a);
      }
    }
    node.parentNode?.replaceChild(frag, node);
  }
  return links;
}
