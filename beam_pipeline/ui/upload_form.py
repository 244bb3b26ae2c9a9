"""An upload's form, read within two limits: the whole body by a deadline, and no silence longer than a read
timeout. A client that declares a body and stops sending, or sends a byte now and then, would otherwise hold
its connection and the task reading it for as long as it likes.

Both limits are `asyncio.timeout` scopes in the reading task itself. `asyncio.wait_for` is not safe here on
Python 3.11: when the deadline's cancellation lands in the same turn of the event loop as a piece of the body,
it returns the piece and drops the cancellation (python/cpython#86296), and a trickle that lands on that turn
is then read for as long as it keeps trickling (the UI's trickle test hit it in one run of three to five).
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request


class UploadTimedOut(Exception):
    """The body did not arrive in time: `silent` when nothing arrived for the read timeout, else the deadline
    passed while pieces were still arriving."""

    def __init__(self, silent: bool) -> None:
        super().__init__("the upload sent nothing for the read timeout" if silent
                         else "the upload did not arrive by its deadline")
        self.silent = silent


async def read_form(request: Request, deadline: float, read_timeout: float, **limits: Any) -> FormData:
    """`request`'s form (`Request.form(**limits)`), its whole body within `deadline` seconds and each piece
    within `read_timeout` seconds of the last. Raises UploadTimedOut; a client that goes away raises
    starlette's ClientDisconnect, as `Request.form` does."""
    receive, clock = request.receive, asyncio.get_running_loop().time
    last_piece = clock()

    async def receive_in_time() -> Any:
        nonlocal last_piece
        async with asyncio.timeout(read_timeout):
            message = await receive()
        last_piece = clock()
        return message

    try:
        async with asyncio.timeout(deadline):
            return await Request(request.scope, receive_in_time).form(**limits)
    except TimeoutError:
        # Told apart by the silence itself, not by which scope expired (both are due at once when the loop was
        # busy).
        raise UploadTimedOut(silent=clock() - last_piece >= read_timeout) from None
