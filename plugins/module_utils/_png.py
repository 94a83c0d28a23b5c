# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""A line plot as PNG, standard library only (zlib), so that the controller
needs no plotting package for the benchmark's figure."""

from __future__ import annotations

import struct
import zlib

# A 3x5 pixel font: each glyph is five rows of three bits.
_FONT = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "/": "001001010100100",
    "-": "000000111000000", "=": "000111000111000", " ": "000000000000000", "(": "010100100100010",
    ")": "010001001001010", ":": "000010000010000", "%": "101001010100101", "+": "000010111010000",
    "A": "010101111101101", "B": "110101110101110", "C": "011100100100011", "D": "110101101101110",
    "E": "111100110100111", "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "J": "001001001101010", "K": "101101110101101", "L": "100100100100111",
    "M": "101111111101101", "N": "110101101101101", "O": "010101101101010", "P": "110101110100100",
    "Q": "010101101110011", "R": "110101110101101", "S": "011100010001110", "T": "111010010010010",
    "U": "101101101101111", "V": "101101101101010", "W": "101101111111101", "X": "101101010101101",
    "Y": "101101010010010", "Z": "111001010100111", "_": "000000000000111",
}
COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
          (227, 119, 194), (127, 127, 127)]


class Canvas:
    def __init__(self, width, height, background=(255, 255, 255)):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def set(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            offset = 3 * (y * self.width + x)
            self.pixels[offset:offset + 3] = bytes(color)

    def rect(self, x0, y0, x1, y1, color):
        for y in range(min(y0, y1), max(y0, y1) + 1):
            for x in range(min(x0, x1), max(x0, x1) + 1):
                self.set(x, y, color)

    def line(self, x0, y0, x1, y1, color, width=2, dash=0):
        """Bresenham, thickened; dash > 0 leaves gaps of that many pixels."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, step = dx + dy, 0
        while True:
            if not dash or (step // dash) % 2 == 0:
                self.rect(x0, y0, x0 + width - 1, y0 + width - 1, color)
            if x0 == x1 and y0 == y1:
                return
            step += 1
            doubled = 2 * err
            if doubled >= dy:
                err += dy
                x0 += sx
            if doubled <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, text, color=(0, 0, 0), scale=2):
        for char in text.upper():
            glyph = _FONT.get(char, _FONT[" "])
            for index, bit in enumerate(glyph):
                if bit == "1":
                    row, col = divmod(index, 3)
                    self.rect(x + col * scale, y + row * scale, x + col * scale + scale - 1,
                              y + row * scale + scale - 1, color)
            x += 4 * scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.pixels[3 * y * self.width:3 * (y + 1) * self.width])
                       for y in range(self.height))

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _nice_max(value):
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value)))
    for step in (0.1, 0.2, 0.25, 0.5, 1.0):
        if value <= magnitude * step:
            return magnitude * step
    return float(magnitude)


def line_plot(series, title, x_label, y_label, width=720, height=440):
    """PNG bytes of series [(label, [(x, y)...], dashed)] on shared axes; points
    whose y is None are left out."""
    canvas = Canvas(width, height)
    left, right, top, bottom = 70, width - 200, 40, height - 50
    points = [(x, y) for _label, data, _dash in series for x, y in data if y is not None]
    xs = sorted({x for x, _y in points}) or [1]
    x_min, x_max = min(xs), max(xs)
    if x_max == x_min:
        x_min, x_max = x_min - 1, x_max + 1
    y_max = _nice_max(max([y for _x, y in points] or [1]))

    def at(x, y):
        return (left + int((x - x_min) / (x_max - x_min) * (right - left)),
                bottom - int(y / y_max * (bottom - top)))

    canvas.text(left, 12, title, scale=2)
    canvas.line(left, top, left, bottom, (0, 0, 0), width=1)
    canvas.line(left, bottom, right, bottom, (0, 0, 0), width=1)
    for tick in range(5):
        value = y_max * tick / 4
        _x, y = at(x_min, value)
        canvas.line(left - 4, y, left, y, (0, 0, 0), width=1)
        canvas.line(left + 1, y, right, y, (225, 225, 225), width=1)
        label = ("%g" % round(value, 2))
        canvas.text(left - 8 - 8 * len(label), y - 5, label)
    for x in xs:
        px, _y = at(x, 0)
        canvas.line(px, bottom, px, bottom + 4, (0, 0, 0), width=1)
        canvas.text(px - 4 * len("%g" % x), bottom + 8, "%g" % x)
    canvas.text((left + right) // 2 - 4 * len(x_label), bottom + 26, x_label)
    canvas.text(4, top - 16, y_label)
    for index, (label, data, dashed) in enumerate(series):
        color = COLORS[index % len(COLORS)]
        drawn = [at(x, y) for x, y in sorted(data) if y is not None]
        for (x0, y0), (x1, y1) in zip(drawn, drawn[1:]):  # noqa: RUF007 - itertools.pairwise is Python 3.10+, module_utils runs on 3.8
            canvas.line(x0, y0, x1, y1, color, width=2, dash=6 if dashed else 0)
        for x, y in drawn:
            canvas.rect(x - 3, y - 3, x + 3, y + 3, color)
        legend_y = top + 18 * index
        canvas.rect(right + 12, legend_y, right + 30, legend_y + 8, color)
        canvas.text(right + 36, legend_y, label[:19])
    return canvas.png()
