"""Draw the tray icons with Pillow and write them as PNG files into the package (``daemon/cairn/icons/``).

One icon per tray state (``cairn.tray.STATES``): a cairn of three stones on a round badge whose
colour says the state — ``idle`` green, ``indexing`` blue (with a progress arc), ``paused`` grey
(with pause bars), ``error`` red (with an exclamation mark). 64×64 px RGBA, drawn at 4× and
downsampled (LANCZOS) for smooth edges. The files are committed; run this again after changing it:

    .venv/bin/python packaging/make_icons.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image, ImageDraw

SIZE = 64
SCALE = 4
OUT = Path(__file__).resolve().parents[1] / "daemon" / "cairn" / "icons"

#: state → (badge colour, mark)
STATES = {
    "idle": ((46, 139, 87), None),
    "indexing": ((33, 102, 204), "arc"),
    "paused": ((120, 120, 120), "pause"),
    "error": ((200, 40, 40), "bang"),
}
STONE = (250, 246, 235)
MARK = (255, 204, 0)


def draw(state: str) -> Image.Image:
    """The icon for ``state`` as a 64×64 RGBA image."""
    colour, mark = STATES[state]
    big = SIZE * SCALE
    s = SCALE
    img = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    d.ellipse((1 * s, 1 * s, 63 * s, 63 * s), fill=colour + (255,))
    # Three stones, largest at the bottom.
    for box in ((14, 40, 50, 54), (18, 27, 46, 40), (23, 15, 41, 27)):
        x0, y0, x1, y1 = (v * s for v in box)
        d.ellipse((x0, y0, x1, y1), fill=STONE + (255,), outline=(60, 60, 60, 255), width=s)
    if mark == "arc":
        d.arc((5 * s, 5 * s, 59 * s, 59 * s), start=-90, end=150, fill=MARK + (255,), width=5 * s)
    elif mark == "pause":
        d.ellipse((38 * s, 2 * s, 62 * s, 26 * s), fill=(40, 40, 40, 255))
        d.rectangle((44 * s, 8 * s, 48 * s, 20 * s), fill=(255, 255, 255, 255))
        d.rectangle((52 * s, 8 * s, 56 * s, 20 * s), fill=(255, 255, 255, 255))
    elif mark == "bang":
        d.ellipse((38 * s, 2 * s, 62 * s, 26 * s), fill=MARK + (255,))
        d.rectangle((48 * s, 6 * s, 52 * s, 17 * s), fill=(0, 0, 0, 255))
        d.rectangle((48 * s, 19 * s, 52 * s, 23 * s), fill=(0, 0, 0, 255))
    return img.resize((SIZE, SIZE), Image.LANCZOS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for state in STATES:
        path = args.out / f"{state}.png"
        draw(state).save(path, optimize=True)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
