"""Small pure text functions of the extractive summarizer (SPEC §5.2).

Clipping and quoting, sentences of assistant prose, command labels, and the exact
error lines, exit status and test tally of a tool result.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "FILE_PATH",
    "SECRET_KEY",
    "URLISH",
    "clip",
    "code",
    "command_label",
    "error_lines",
    "exit_status",
    "first_line",
    "leading_code",
    "norm",
    "one_line",
    "prose",
    "sentences",
    "tally_line",
    "tool_output_facts",
    "words",
]

_EXT = (
    r"py|pyi|pyx|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|toml|cfg|ini|ya?ml|md|rst|txt|"
    r"c|h|cc|cpp|hpp|rs|go|java|kt|rb|php|sh|bash|zsh|ps1|html?|css|scss|sql|xml|csv|tsv|lock|"
    r"log|diff|patch|proto|gradle|swift|scala|lua|jl|tex|bib|svg|dockerfile"
)
# A file path is recognized by its extension; a URL matching it is no file.
FILE_PATH = re.compile(
    rf"(?<![\w/.:@-])(?:~|\.{{1,2}})?/?(?:[\w.+@-]+/)*[\w+@-][\w.+@-]*\.(?:{_EXT})(?![\w/-])",
    re.I,
)
URLISH = re.compile(r"^[a-z]+://|^www\.", re.I)
SECRET_KEY = re.compile(
    r"secret|passw|api[ _-]?key|private[ _-]?key|credential|token(?:$|[ _.-]?(?:id|value)\b)",
    re.I,
)
"""A key whose value is not copied into a summary's labelled values."""


def words(text: str) -> frozenset[str]:
    """The set of the space-separated words of ``text`` (for word lists written as prose)."""
    return frozenset(text.split())


# --------------------------------------------------------------------------- clipping, quoting


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters at a line or word break, marked."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit)
    if cut < limit * 0.6:
        cut = text.rfind(" ", 0, limit)
    if cut < limit * 0.6:
        cut = limit
    head = text[:cut].rstrip()
    return f"{head} … [+{len(text) - len(head)} chars]"


def one_line(text: str, limit: int) -> str:
    """``text`` with its whitespace runs collapsed to single spaces, clipped."""
    return clip(re.sub(r"\s+", " ", text).strip(), limit)


def first_line(text: str, limit: int) -> str:
    """The first non-blank line of ``text``, clipped ("" when there is none)."""
    for line in text.splitlines():
        if line.strip():
            return clip(line.strip(), limit)
    return ""


def norm(text: str) -> str:
    """``text`` for comparison: whitespace collapsed, lower case."""
    return re.sub(r"\s+", " ", text).strip().lower()


def code(text: str) -> str:
    """``text`` as Markdown inline code."""
    if "`" not in text:
        return f"`{text}`"
    return f"`` {text} ``"


def leading_code(text: str) -> str | None:
    """The inline code a bullet starts with (what :func:`code` wrote), if any."""
    match = re.match(r"^(?:``\s(.+?)\s``|`([^`]+)`)", text)
    if not match:
        return None
    return match.group(1) or match.group(2)


def command_label(text: str, limit: int) -> str:
    """A command as one line: its first line, and its last line when it has several."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) == 1:
        return clip(lines[0], limit)
    first, last = clip(lines[0], limit // 2), clip(lines[-1], limit // 2)
    return f"{first} … {last} ({len(lines)} lines)"


# --------------------------------------------------------------------------- assistant prose

_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Za-z0-9`\"'(\[$€£])|\n+")
_ABBREVIATIONS = re.compile(r"\b(e\.g|i\.e|etc|vs|cf|approx|incl)\.", re.I)


def prose(text: str) -> str:
    """Assistant text without code blocks and agent-format labels."""
    text = _CODE_FENCE.sub(" ", text)
    return re.sub(r"^\s*(?:THOUGHT|Thought|THINKING)\s*:\s*", "", text)


def sentences(text: str, min_chars: int = 12) -> list[str]:
    """The sentences of a message's prose, list marks stripped, those under ``min_chars`` left out.

    A sentence ends at ``.``, ``!`` or ``?`` before a space (also before a lower-case word:
    people type that way) or at a line break; ``e.g.``, ``i.e.`` and the like do not end one.
    """
    return list(_sentences(text, min_chars))


@functools.lru_cache(maxsize=4096)  # a message is split again by each reader of it
def _sentences(text: str, min_chars: int) -> tuple[str, ...]:
    out = []
    plain = _ABBREVIATIONS.sub(lambda m: m.group(1) + "\x00", prose(text))
    for raw in _SENTENCE.split(plain):
        sentence = raw.replace("\x00", ".").strip().lstrip("-*•> ").strip()
        sentence = _NUMBERED.sub("", sentence)
        sentence = _BOLD_HEAD.sub("", sentence).strip()
        if len(sentence) >= min_chars and _LETTER.search(sentence):
            out.append(sentence)
    return tuple(out)


def clear_sentence_cache() -> None:
    """Forget the memoized sentences (see :func:`~.salience.clear_caches`)."""
    _sentences.cache_clear()


_NUMBERED = re.compile(r"^\d+[.)]\s+")
_BOLD_HEAD = re.compile(r"^\*\*[^*]{1,40}\*\*:?\s*")
_LETTER = re.compile(r"[A-Za-z]")


# --------------------------------------------------------------------------- tool results

_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|exit code[ :=]+(-?\d+)", re.I)
_ERROR_LINE = re.compile(
    r"^[ \t]*(?:E[ \t]+)?(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Failure|Interrupt|"
    r"Exit|Warning)(?::[ \t]?[^\n]*)?$"
    r"|^[ \t]*FAILED\b[^\n]*$"
    r"|^[ \t]*ERROR\b:?[ \t][^\n]*$"
    r"|^[^\s:]+:\d+(?::\d+)?: (?:error|fatal error):[^\n]*$"
    r"|^[ \t]*(?:error|fatal)(?:\[\w+\])?: [^\n]*$"
    r"|^[^\n]*(?:command not found|No such file or directory|Permission denied)[^\n]*$"
    r"|^[ \t]*npm ERR![^\n]*$",
    re.M,
)
_EXCEPTION_NAME = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b")
_HARNESS_NOISE = re.compile(r"\[Python Interpreter:[^\]]*\]?|\[Command finished with[^\]]*\]?")
_TEST_SUMMARY = re.compile(
    r"^=*[ \t]*(?:\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected)"
    r"(?:, )?)+[^\n]*$",
    re.M,
)


def exit_status(text: str, is_error: bool | None) -> int | None:
    """The exit status a tool result reports, else 1 for an error result, else None."""
    match = _RETURNCODE.search(text[:400]) or _RETURNCODE.search(text[-400:])
    if match:
        return int(match.group(1) or match.group(2))
    if is_error:
        return 1
    return None


def _traceback_ends(text: str) -> list[str]:
    """The exception line that ends each Python traceback in ``text``."""
    out = []
    for match in re.finditer(r"^Traceback \(most recent call last\):[ \t]*\r?$", text, re.M):
        for line in text[match.end() :].splitlines()[1:200]:
            if not line.strip() or line[:1] in " \t" or line.startswith("During handling"):
                continue
            out.append(line)
            break
    return out


def error_lines(text: str) -> list[str]:
    """The exact error lines of a tool result, most telling first, at most four.

    The line ending a Python traceback comes first, then other exception lines,
    then test-runner and compiler lines (``FAILED …``, ``file:1: error: …``).
    """
    found: dict[str, int] = {}
    candidates = [(0, line) for line in _traceback_ends(text)]
    candidates += [(1, m.group(0)) for m in _ERROR_LINE.finditer(text)]
    for rank, raw in candidates:
        line = _HARNESS_NOISE.sub("", raw).strip()
        if line.startswith(("E ", "E\t")):
            line = line[1:].strip()
        if len(line) < 4 or (line.endswith(":") and " " not in line.rstrip(":")):
            continue
        if _EXCEPTION_NAME.match(line):
            rank = 0
        key = one_line(line, 200)
        found[key] = min(found.get(key, rank), rank)
    return sorted(found, key=lambda line: found[line])[:4]


def tally_line(text: str) -> str | None:
    """The test runner's last tally line (``1 failed, 4 passed in 0.31s``), if any."""
    matches = _TEST_SUMMARY.findall(text[-4000:])
    return one_line(matches[-1].strip("= "), 160) if matches else None


_SECTION_LINE = re.compile(r"^[ \t]*(?:\d+\t)?\[([A-Za-z_][\w.-]*)\][ \t]*$", re.M)
_KV_LINE = re.compile(
    r"^[ \t]*(?:\d+\t)?(?P<key>[A-Za-z_][\w.-]*)[ \t]*(?P<sep>=|:)[ \t]*"
    r"(?P<value>\"[^\"\n]{0,60}\"|'[^'\n]{0,60}'|[^\s#,;()\[\]{}\"']{1,60})[ \t]*(?:#[^\n]*)?\r?$",
    re.M,
)


def tool_output_facts(text: str, limit: int = 20) -> list[tuple[str, str]]:
    """``(key, value)`` pairs a tool printed: a dotted or ``UPPER_CASE`` key set to a value on
    a line of its own, or any key under a ``[section]`` header (``section.key``)."""
    if "=" not in text and ":" not in text:
        return []
    text = text[:200_000]
    sections = [(m.start(), m.group(1)) for m in _SECTION_LINE.finditer(text)]
    out: list[tuple[str, str]] = []
    for m in _KV_LINE.finditer(text):
        key, value = m.group("key"), m.group("value").strip("'\"")
        if not value or SECRET_KEY.search(key):
            continue
        dotted = "." in key.strip(".")
        upper = bool(re.fullmatch(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+", key))
        if m.group("sep") == ":" and not (dotted or upper):
            continue
        if not (dotted or upper):
            section = next((name for at, name in reversed(sections) if at < m.start()), None)
            if section is None or m.group("sep") != "=":
                continue
            key = f"{section}.{key}"
        out.append((key, value))
        if len(out) >= limit:
            break
    return out
