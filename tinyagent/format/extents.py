"""Where many objects in one text end, in one pass: how a reply with many lines that open an object is read
in time linear in its length. Pure text."""

from __future__ import annotations


class ObjectExtents:
    """Where each of many objects in one text ends: for every '{' at a position of `starts`, what
    `balanced_object` would find from it (the end, one past its matching '}', or None when it does not
    close) and how deep braces nest in it, in time linear in the text however many starts there are.

    Scanning every start to its end is quadratic in a reply with many lines that open an object and
    never close it (a model stuck repeating a call it does not finish). So the starts are scanned from
    the last one back: a scan that meets a later start outside a quoted string (where that start's own
    scan would begin the same) jumps over that start's object, or, when that object never closes, knows
    that it cannot close either. `steps` counts the characters read one by one."""

    def __init__(self, text: str, starts):
        self.text, self.steps = text, 0
        self.starts = sorted(set(starts))
        self.extent: dict[int, tuple[int | None, int]] = {}  # start -> (end or None, brace depth)
        for k in reversed(range(len(self.starts))):
            self.extent[self.starts[k]] = self._scan(k)

    def end(self, start: int) -> int | None:
        return self.extent[start][0]

    def depth(self, start: int) -> int:
        """How deep braces nest from `start` to its object's end (to the text's end when it does not close)."""
        return self.extent[start][1]

    def _scan(self, k: int) -> tuple[int | None, int]:
        text, starts = self.text, self.starts
        i, later = starts[k], k + 1  # later: the next start not yet passed
        depth = deepest = 0
        quote, escaped = "", False
        while i < len(text):
            while later < len(starts) and starts[later] < i:  # passed inside a quoted string
                later += 1
            if not quote and later < len(starts) and starts[later] == i:
                end, inner = self.extent[i]
                deepest = max(deepest, depth + inner)
                if end is None:
                    return None, deepest
                i, later = end, later + 1
                continue
            ch = text[i]
            self.steps += 1
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    quote = ""
            elif ch in "\"'":
                quote = ch
            elif ch == "{":
                depth += 1
                deepest = max(deepest, depth)
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return i + 1, deepest
            i += 1
        return None, deepest
