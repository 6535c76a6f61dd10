"""Textual's ``@work`` for the parts a screen owns (plain objects, not widgets): the worker runs on the part's
screen, so a group is exclusive per screen exactly as when the method was the screen's own (``exclusive=True``
cancels the screen's other workers of that group, whichever part started them), and the app's one handler sees
its errors through the screen's ``on_worker_state_changed``."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import partial, wraps
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from textual.screen import Screen
from textual.worker import Worker


class ScreenPart(Protocol):
    """A part whose workers run on its screen."""

    @property
    def screen(self) -> Screen[Any]: ...


Part = TypeVar("Part", bound=ScreenPart)
Params = ParamSpec("Params")
Method = Callable[Concatenate[Part, Params], Coroutine[Any, Any, None]]


Runner = Callable[Concatenate[Part, Params], Worker[None]]


def work_on_screen(*, group: str, exclusive: bool = False) -> Callable[[Method[Part, Params]], Runner[Part, Params]]:
    """``@work(group=…, exclusive=…, exit_on_error=False)`` for a part's async method: same name, group and
    description as Textual gives the worker of a screen's own method."""

    def decorate(method: Method[Part, Params]) -> Runner[Part, Params]:
        @wraps(method)
        def run(part: Part, /, *args: Params.args, **kwargs: Params.kwargs) -> Worker[None]:
            arguments = [repr(arg) for arg in args] + [f"{key}={value!r}" for key, value in kwargs.items()]
            return part.screen.run_worker(partial(method, part, *args, **kwargs), name=method.__name__, group=group,
                                          description=f"{method.__name__}({', '.join(arguments)})",
                                          exclusive=exclusive, exit_on_error=False)

        return run

    return decorate
