"""System prompts: a thread's own, roles from the config folder, and which one a run sends.

Vocabulary:

- **thread prompt**: the system prompt in a thread's state (set by ``/system``, ``/role``,
  ``ask --system`` or ``--role``), with the role it came from. Forks carry it; it is never
  folded into the summary.
- **role**: a named, reusable prompt: ``NAME.md`` in ``~/.config/chatbot/roles``.
- **effective prompt**: what a run sends: the run's context (Studio's ``system_prompt``) beats
  the thread prompt, which beats ``CHATBOT_SYSTEM_PROMPT``.

Standard library only, so that listing roles stays fast.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from chatbot.config.sources import SettingsError, config_dir
from chatbot.errors import FriendlyError

ROLE_SUFFIX = ".md"
DEFAULT_SOURCE = "CHATBOT_SYSTEM_PROMPT"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class RoleError(SettingsError, FriendlyError):
    """A role that cannot be used (missing, empty, unreadable, a bad name): one line."""


def roles_dir() -> Path:
    """The folder roles are read from: ``roles`` in the user's chatbot config folder."""
    return config_dir() / "roles"


@dataclass(frozen=True)
class Role:
    """A named prompt read from ``NAME.md``."""

    name: str
    path: Path
    prompt: str
    problem: str = ""
    """Why the role cannot be used (a bad name, not UTF-8, empty); ``""`` when it can."""

    @property
    def first_line(self) -> str:
        """The prompt's first non-blank line, or what is wrong with the role (listings)."""
        if self.problem:
            return f"(cannot be used: {self.problem})"
        return next((line.strip() for line in self.prompt.splitlines() if line.strip()), "")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise RoleError(f"role file {str(path)!r} is not UTF-8 text: save it as UTF-8") from None
    except OSError as error:
        raise RoleError(f"cannot read role file {str(path)!r}: {error.strerror or error}") from None


def list_roles() -> list[Role]:
    """The roles, by name. A role that cannot be used is listed with its ``problem`` rather
    than left out."""
    folder = roles_dir()
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob(f"*{ROLE_SUFFIX}")):
        name = path.name[: -len(ROLE_SUFFIX)]
        if not path.is_file():
            continue
        if not _NAME.fullmatch(name):  # listed, so that it is not silently missing
            problem = "rename the file: letters, digits, '-', '_' and '.' only"
            found.append(Role(name, path, "", problem))
            continue
        try:
            prompt = _read(path)
        except RoleError as error:
            found.append(Role(name, path, "", str(error).split(": ")[-1]))
            continue
        found.append(Role(name, path, prompt, "" if prompt else "it is empty"))
    return found


def how_to_add() -> str:
    """One line saying where roles go."""
    return f"add a role: write its prompt in {roles_dir() / ('NAME' + ROLE_SUFFIX)}"


def load_role(name: str) -> Role:
    """The role ``name``; a :class:`RoleError` naming the folder and its roles otherwise."""
    folder = roles_dir()
    name = name.strip().removesuffix(ROLE_SUFFIX)
    if not _NAME.fullmatch(name):
        raise RoleError(
            f"{name!r} is not a role name: letters, digits, '-', '_' and '.' (the file NAME.md)"
        )
    path = folder / f"{name}{ROLE_SUFFIX}"
    if not path.is_file():
        names = [role.name for role in list_roles()]
        there = f"roles there: {', '.join(names)}" if names else how_to_add()
        raise RoleError(f"no role {name!r} in {folder} ({there})")
    prompt = _read(path)
    if not prompt:
        raise RoleError(f"role {name!r} is empty: write its prompt in {path}")
    return Role(name, path, prompt)


def check_prompt_fits(prompt: str, tokens: int, most: int | None, model: str) -> None:
    """Refuse a thread prompt that alone fills the model's input (``most`` tokens): every turn
    would fail with it."""
    if most and tokens >= most:
        raise RoleError(
            f"that system prompt is about {tokens:,} tokens, and {model} takes {most:,} at "
            "most (the prompt and the conversation together): shorten it; nothing was changed"
        )


class PromptChoice(NamedTuple):
    """The system prompt a run sends, and where it comes from."""

    text: str
    source: str
    """``run context``, ``this thread``, ``role NAME``, :data:`DEFAULT_SOURCE`, or ``none``."""


def effective_prompt(
    run_prompt: str, thread_prompt: str, thread_role: str = "", default: str = ""
) -> PromptChoice:
    """The precedence rule: the run's context, then the thread's prompt (its role's name when
    it came from one), then ``CHATBOT_SYSTEM_PROMPT`` (``default``); blank counts as unset."""
    if run_prompt.strip():
        return PromptChoice(run_prompt.strip(), "run context")
    if thread_prompt.strip():
        source = f"role {thread_role}" if thread_role else "this thread"
        return PromptChoice(thread_prompt.strip(), source)
    if default.strip():
        return PromptChoice(default, DEFAULT_SOURCE)
    return PromptChoice("", "none")
