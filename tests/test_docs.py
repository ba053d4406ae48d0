"""The README stays short and points everywhere; the pages' links lead somewhere; the README's
cheat sheet is what the command tables make; ARCHITECTURE.md names code that exists."""

from __future__ import annotations

import re
from pathlib import Path

from chatbot.cli.cheatsheet import cheat_sheet

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
CHEAT_SHEET_START = (
    "<!-- made by `python -m chatbot.cli.cheatsheet`; tests/test_docs.py checks it -->\n"
)
CHEAT_SHEET_END = "<!-- end of cheat sheet -->"


def test_the_readme_is_at_most_8_kib() -> None:
    size = len(README.read_bytes())
    assert size <= 8192, f"README.md is {size:,} bytes: move details to docs/"


def test_the_readme_links_every_docs_page() -> None:
    text = README.read_text()
    assert len(PAGES) >= 10
    for page in PAGES:
        assert f"](docs/{page.name})" in text, f"README.md does not link docs/{page.name}"
    assert "](ARCHITECTURE.md)" in text and "](CHANGELOG.md)" in text


def test_the_readme_keeps_the_commands_ci_runs() -> None:
    """`.ci/run` installs as the README says and runs its test command."""
    text = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for command in ("uv sync --locked --compile-bytecode", "uv run --group dev pytest"):
        assert command in text, command
    assert "uv sync --locked --compile-bytecode" in ci
    assert "uv run --locked --group dev pytest" in ci


def test_the_cheat_sheet_is_what_the_command_tables_make() -> None:
    text = README.read_text()
    assert text.count(CHEAT_SHEET_START) == 1 and text.count(CHEAT_SHEET_END) == 1
    shown = text.split(CHEAT_SHEET_START)[1].split(CHEAT_SHEET_END)[0]
    assert shown == cheat_sheet(), (
        "README.md's cheat sheet differs from the command tables: paste the output of "
        "`uv run python -m chatbot.cli.cheatsheet` between its markers"
    )


def test_the_cheat_sheet_has_one_line_per_command() -> None:
    from chatbot.terminal.commands import COMMANDS

    rows = [line for line in cheat_sheet().splitlines() if line.startswith("| `")]
    for name, command in COMMANDS.items():
        usage = command.usage.replace("|", "\\|")
        assert sum(row.startswith(f"| `{usage}`") for row in rows) == 1, name
    for name in ("ask", "threads", "db copy", "config init"):
        assert sum(row.startswith(f"| `chatbot {name}") for row in rows) == 1, name


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(text: str) -> set[str]:
    outside_code = re.sub(r"```.*?```", "", text, flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", outside_code, flags=re.M)}


def test_relative_links_lead_to_files_and_headings_that_exist() -> None:
    checked = 0
    for page in [README, ARCHITECTURE, ROOT / "CHANGELOG.md", *PAGES]:
        text = page.read_text()
        outside_code = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", outside_code):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            name = page.relative_to(ROOT)
            assert where.exists(), f"{name} links {target}: no such file"
            if anchor and where.suffix == ".md":
                assert anchor in _anchors(where.read_text()), f"{name} links {target}: no heading"
            checked += 1
    assert checked > 30


def _definitions() -> dict[Path, str]:
    files = {path: path.read_text() for path in (ROOT / "chatbot").rglob("*.py")}
    files[ROOT / "graphs" / "chatbot.py"] = (ROOT / "graphs" / "chatbot.py").read_text()
    return files


def _defines(source: str, name: str) -> bool:
    pattern = rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]"
    return re.search(pattern, source, flags=re.M) is not None


def test_architecture_names_code_that_exists() -> None:
    """In ARCHITECTURE.md's tables, each `name()` (or CONSTANT, or Class) is defined in the file
    named before it in its row, and each `Class.member` in the file that defines the class."""
    sources = _definitions()
    checked = 0
    for row in ARCHITECTURE.read_text().splitlines():
        if not row.startswith("| ") or row.startswith(("| behaviour", "|---")):
            continue
        current: Path | None = None
        for token in re.findall(r"`([^`]+)`", row.split(" | ", 1)[1]):
            if token.endswith(".py"):
                current = ROOT / token if token.startswith("graphs/") else ROOT / "chatbot" / token
                assert current in sources, f"ARCHITECTURE.md names {token}: no such file"
                continue
            member = re.fullmatch(r"([A-Z]\w*)\.(\w+)(?:\(\))?", token)
            if member:
                cls, name = member.groups()
                homes = [s for s in sources.values() if re.search(rf"^class {cls}\b", s, re.M)]
                assert homes, f"ARCHITECTURE.md names {token}: no class {cls}"
                assert any(_defines(s, name) for s in homes), f"{cls} has no {name}"
                checked += 1
                continue
            plain = re.fullmatch(r"(\w+)(\(\))?", token)
            if not plain or not (plain.group(2) or token[0].isupper()):
                continue  # a value, a table name, a setting
            name = plain.group(1)
            if current is None:
                assert any(_defines(s, name) for s in sources.values()), token
            else:
                where = current.relative_to(ROOT)
                assert _defines(sources[current], name), f"{token} is not in {where}"
            checked += 1
    assert checked > 100
