"""The file operations a shell script names (a part of :mod:`dashr_ext._fileops`, SPEC §7.1).

A quote-aware lexer splits the script into simple commands; each command's program and
redirections then say what it does to which file. ``bash -c``, ``python -c``, ``python
<<EOF`` and ``apply_patch`` bodies are analysed as what they are.

The lexer is hand-written because :mod:`shlex` reads shell differently where it matters
here: a quoted ``'>'`` comes back as the operator ``>``, ``#`` inside a word starts a
comment, ``$(…)``, backticks and heredocs are unknown to it, and an open quote can only be
found by re-lexing, which makes long multi-line ``python -c "…"`` scripts quadratic.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ._fileops_code import FileOp, patch_ops, python_ops

__all__ = ["argv_ops", "operands", "shell_ops", "shell_words"]

_OPERATORS = (
    "&>>", "<<<", "<<-", "&&", "||", ";;", "|&", "&>", ">>", ">&", ">|", "<<", "<>", "<&",
    ">", "<", "|", "&", ";", "(", ")",
)  # fmt: skip
_OPERATOR_CHARS = frozenset(";&|<>()")
_SEPARATORS = frozenset({";", "&&", "||", "|", "|&", "&", ";;", "(", ")"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_MAX_DEPTH = 3


def shell_ops(script: str, depth: int = 0) -> list[FileOp]:
    """The file operations of a shell script, in order (``depth``: ``bash -c`` nesting)."""
    if depth > _MAX_DEPTH:
        return []
    out: list[FileOp] = []
    for command in _commands(_lex(script)):
        out.extend(_command_ops(command, depth))
    return out


def argv_ops(argv: Sequence[str]) -> list[FileOp]:
    """Operations of an exec-style argv (``["bash", "-lc", "…"]``)."""
    return _command_ops(_Command(list(argv), []), 0)


def shell_words(line: str) -> list[str]:
    """The words of one shell line, dequoted, without its operators."""
    return [tok.text for tok in _lex(line) if tok.kind == "word"]


def operands(args: Sequence[str], value_options: frozenset[str] = frozenset()) -> list[str]:
    """The non-option arguments, skipping the value of each option in ``value_options``."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(a for a in args[i + 1 :] if a)
            break
        if arg.startswith("-") and len(arg) > 1:
            i += 2 if arg in value_options else 1
            continue
        if arg and arg != "-":
            out.append(arg)
        i += 1
    return out


# --------------------------------------------------------------------------- lexer


@dataclass
class _Tok:
    kind: str  # "word" or "op"
    text: str
    body: str | None = None  # heredoc body, on the delimiter word


def _closing(s: str, start: int, quote: str) -> int:
    """Index of the quote closing one opened just before ``start``, or -1."""
    i = start
    while i < len(s):
        c = s[i]
        if c == "\\" and quote != "'":
            i += 2
            continue
        if c == quote:
            return i
        i += 1
    return -1


def _balanced(s: str, start: int, open_: str, close: str) -> int:
    """Index of the ``close`` matching the ``open_`` at ``start``, or -1."""
    depth = 0
    i = start
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"" and open_ == "(":
            end = _closing(s, i + 1, c)
            if end < 0:
                return -1
            i = end + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _lex(s: str) -> list[_Tok]:
    """Split a shell script into words and operators, POSIX-quote-aware.

    Heredoc bodies are attached to their delimiter word and never tokenised. An unbalanced
    quote is taken as a literal character (the fallback for text that is not valid shell).
    """
    toks: list[_Tok] = []
    buf: list[str] = []
    in_word = False
    quoted = False
    expect_delim: bool | None = None  # strip-tabs flag of a heredoc whose delimiter comes next
    unbalanced = False  # once a $( or ${ is unclosed, later ones are literal (keeps this linear)
    pending: list[tuple[_Tok, bool]] = []
    i, n = 0, len(s)

    def flush() -> None:
        nonlocal in_word, quoted, expect_delim
        if in_word:
            tok = _Tok("word", "".join(buf))
            toks.append(tok)
            if expect_delim is not None:
                pending.append((tok, expect_delim))
                expect_delim = None
        buf.clear()
        in_word = quoted = False

    while i < n:
        c = s[i]
        if c == "\\":
            if i + 1 < n and s[i + 1] == "\n":
                i += 2
                continue
            buf.append(s[i + 1] if i + 1 < n else c)
            in_word = quoted = True
            i += 2
            continue
        if c in "'\"":
            end = _closing(s, i + 1, c)
            if end < 0:
                buf.append(c)
                in_word = True
                i += 1
                continue
            inner = s[i + 1 : end]
            if c == '"':
                inner = re.sub(r'\\([\\"$`])', r"\1", inner).replace("\\\n", "")
            buf.append(inner)
            in_word = quoted = True
            i = end + 1
            continue
        if c == "$" and i + 1 < n and s[i + 1] in "({'":
            if s[i + 1] == "'":
                end = _closing(s, i + 2, "'")
            elif unbalanced:
                end = -1
            else:
                end = _balanced(s, i + 1, s[i + 1], ")" if s[i + 1] == "(" else "}")
                unbalanced = end < 0
            if end < 0:
                buf.append(c)
                in_word = True
                i += 1
                continue
            buf.append(s[i : end + 1])
            in_word = quoted = True
            i = end + 1
            continue
        if c == "`":
            end = _closing(s, i + 1, "`")
            if end < 0:
                buf.append(c)
                in_word = True
                i += 1
                continue
            buf.append(s[i : end + 1])
            in_word = quoted = True
            i = end + 1
            continue
        if c == "#" and not in_word:
            end = s.find("\n", i)
            i = n if end < 0 else end
            continue
        if c == "\n":
            flush()
            toks.append(_Tok("op", ";"))
            i += 1
            for tok, strip_tabs in pending:
                lines: list[str] = []
                while i < n:
                    end = s.find("\n", i)
                    line = s[i:] if end < 0 else s[i:end]
                    i = n if end < 0 else end + 1
                    if (line.lstrip("\t") if strip_tabs else line).rstrip("\r") == tok.text:
                        break
                    lines.append(line)
                tok.body = "\n".join(lines)
            pending.clear()
            continue
        if c in " \t\r":
            flush()
            i += 1
            continue
        if c in _OPERATOR_CHARS:
            op = next(o for o in _OPERATORS if s.startswith(o, i))
            text = "".join(buf)
            if op[0] in "<>" and in_word and not quoted and text.isdigit():
                buf.clear()  # an fd number prefix (2>, 1>>): not a word
                in_word = False
            flush()
            toks.append(_Tok("op", op))
            if op in ("<<", "<<-"):
                expect_delim = op == "<<-"
            i += len(op)
            continue
        buf.append(c)
        in_word = True
        i += 1
    flush()
    return toks


@dataclass
class _Command:
    argv: list[str]
    redirects: list[tuple[str, _Tok | None]]


def _commands(toks: Sequence[_Tok]) -> Iterator[_Command]:
    argv: list[str] = []
    redirects: list[tuple[str, _Tok | None]] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        if tok.kind == "op" and tok.text in _SEPARATORS:
            if argv or redirects:
                yield _Command(argv, redirects)
            argv, redirects = [], []
        elif tok.kind == "op":
            target = toks[i + 1] if i + 1 < len(toks) and toks[i + 1].kind == "word" else None
            redirects.append((tok.text, target))
            if target is not None:
                i += 1
        else:
            argv.append(tok.text)
        i += 1
    if argv or redirects:
        yield _Command(argv, redirects)


# --------------------------------------------------------------------------- commands

_RESERVED = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time"})
# Commands that run the rest of the line, with their options that take a value.
_PREFIX_COMMANDS: Mapping[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "nohup": frozenset(),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _strip_prefixes(argv: list[str]) -> list[str]:
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _RESERVED or _ASSIGNMENT.match(word):
            i += 1
        elif word in _PREFIX_COMMANDS:
            value_options = _PREFIX_COMMANDS[word]
            i += 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in value_options else 1
        elif word == "timeout":
            i += 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in ("-s", "-k", "--signal", "--kill-after") else 1
            i += 1  # the duration
        else:
            break
    return argv[i:]


def _is_device(path: str) -> bool:
    return path.startswith("/dev/") or path == "/dev"


_EXPANSION_ONLY = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*|\$\{[^}]*\}|\$\(.*\)|`.*`", re.DOTALL)


def _shell_path(word: str) -> bool:
    """Whether a shell word names a file: not a device, not just a variable or substitution."""
    return bool(word) and not _is_device(word) and _EXPANSION_ONLY.fullmatch(word) is None


_READ_COMMANDS: Mapping[str, frozenset[str]] = {
    "cat": frozenset(),
    "tac": frozenset(),
    "less": frozenset(),
    "more": frozenset(),
    "bat": frozenset(),
    "head": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "tail": frozenset({"-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--pid"}),
    "nl": frozenset({"-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w"}),
}
_PYTHON = re.compile(r"python[0-9.]*")
_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})


def _command_ops(command: _Command, depth: int) -> list[FileOp]:
    out: list[FileOp] = []
    argv = _strip_prefixes(command.argv)
    heredoc = next(
        (t.body for op, t in command.redirects if op in ("<<", "<<-") and t and t.body is not None),
        None,
    )
    if argv:
        name = argv[0].rsplit("/", 1)[-1]
        out.extend(
            op
            for op in _program_ops(name, argv[1:], heredoc, depth)
            if _shell_path(op.path) and (op.source is None or _shell_path(op.source))
        )
    for op, target in command.redirects:
        if target is None or not _shell_path(target.text):
            continue
        path = target.text
        if op in _WRITE_REDIRECTS or (op == ">&" and not (path.isdigit() or path == "-")):
            out.append(FileOp("write", path))
        elif op in ("<", "<>"):
            out.append(FileOp("read", path))
    return out


def _program_ops(name: str, args: list[str], heredoc: str | None, depth: int) -> list[FileOp]:
    if name in _READ_COMMANDS:
        return [FileOp("read", p) for p in operands(args, _READ_COMMANDS[name])]
    if name == "sed":
        return _sed_ops(args)
    if name == "tee":
        return [FileOp("write", p) for p in operands(args)]
    if name in ("rm", "unlink"):
        return [FileOp("delete", p) for p in operands(args)]
    if name == "touch":
        return [FileOp("create", p) for p in operands(args, frozenset({"-d", "-r", "-t"}))]
    if name in ("mv", "cp"):
        return _transfer_ops("move" if name == "mv" else "copy", args)
    if name in _SHELLS:
        script = _dash_c(args)
        if script is not None:
            return shell_ops(script, depth + 1)
        if heredoc is not None and not operands(args):
            return shell_ops(heredoc, depth + 1)
        return []
    if _PYTHON.fullmatch(name):
        code = _dash_c(args)
        if code is not None:
            return python_ops(code)
        if heredoc is not None and not operands(args):
            return python_ops(heredoc)
        return []
    if name in ("apply_patch", "applypatch"):
        text = heredoc if heredoc is not None else (args[0] if args else "")
        return patch_ops(text)
    return []


def _dash_c(args: Sequence[str]) -> str | None:
    """The script of ``-c SCRIPT`` (also in clusters such as ``-lc``), if present."""
    for i, arg in enumerate(args):
        if arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]:
            return args[i + 1] if i + 1 < len(args) else None
        if not arg.startswith("-"):
            return None
    return None


def _sed_ops(args: Sequence[str]) -> list[FileOp]:
    in_place = False
    has_script = False
    files: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            files.extend(args[i + 1 :])
            break
        if arg.startswith("--"):
            if arg.startswith("--in-place"):
                in_place = True
            elif arg.startswith(("--expression", "--file")):
                has_script = True
                if "=" not in arg:
                    i += 1
            elif arg in ("--line-length",):
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            for j, flag in enumerate(arg[1:], start=1):
                if flag == "i":
                    in_place = True
                    break  # the rest of the cluster is a backup suffix
                if flag in "efl":
                    if flag in "ef":
                        has_script = True
                    if j == len(arg) - 1:
                        i += 1  # the value is the next argument
                    break
        elif not has_script:
            has_script = True  # the first operand is the script
        else:
            files.append(arg)
        i += 1
    op = "edit" if in_place else "read"
    return [FileOp(op, p) for p in files if p != "-"]


def _transfer_ops(op: str, args: Sequence[str]) -> list[FileOp]:
    target_dir: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-t", "--target-directory") and i + 1 < len(args):
            target_dir = args[i + 1]
            i += 2
            continue
        if arg.startswith("--target-directory="):
            target_dir = arg.split("=", 1)[1]
        elif arg in ("-S", "--suffix"):
            i += 1
        else:
            rest.append(arg)
        i += 1
    files = operands(rest)
    if target_dir is None:
        if len(files) < 2:
            return []
        target_dir = files.pop()
    return [FileOp(op, target_dir, source) for source in files]
