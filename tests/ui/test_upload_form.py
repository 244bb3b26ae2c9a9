"""`upload_form.read_form`'s two limits, on bodies fed by hand through ASGI `receive`, in this process: no
server, no socket (the server's own behaviour over a socket is tests/ui/test_hardening.py's)."""

import asyncio

import pytest
from starlette.requests import Request

from beam_pipeline.ui.upload_form import UploadTimedOut, read_form

HEAD = b'--x\r\nContent-Disposition: form-data; name="image"; filename="a.jpg"\r\n\r\n\xff\xd8\xff'
SCOPE = {"type": "http", "method": "POST", "path": "/search",
         "headers": [(b"content-type", b"multipart/form-data; boundary=x")]}
BOUND = 30.0  # Seconds a read may take on a loaded machine before it counts as never ending: not a timing check.


class Body:
    """A request body fed through ASGI `receive`: `pieces` (an async iterator of bytes, each sent with
    more_body) until it ends or `end()` is called. Ending it is how a test stops a read that no limit ended:
    cancelling is no use, since the bug under test is a cancellation that is dropped."""

    def __init__(self, pieces):
        self.pieces, self.ended = pieces, False

    def end(self):
        self.ended = True

    def request(self):
        async def receive():
            if not self.ended:
                try:
                    return {"type": "http.request", "body": await anext(self.pieces), "more_body": True}
                except StopAsyncIteration:
                    pass
            return {"type": "http.request", "body": b"", "more_body": False}
        return Request(SCOPE, receive)


async def finished(body, **limits):
    """How read_form(body's request, **limits) ended: its result, or its exception. Fails the test when it is
    still reading at BOUND seconds (its body is ended first, so that the read stops)."""
    task = asyncio.ensure_future(read_form(body.request(), **limits))
    done, _ = await asyncio.wait({task}, timeout=BOUND)
    if not done:
        body.end()
        await asyncio.wait({task})
        pytest.fail(f"the read was still going after {BOUND:g} s: a limit did not end it")
    return task


def test_a_whole_body_in_time_is_the_form():
    async def pieces():
        for piece in (HEAD, b"\xd9", b"\r\n--x--\r\n"):
            yield piece

    async def main():
        task = await finished(Body(pieces()), deadline=BOUND, read_timeout=BOUND, max_files=1)
        form = task.result()
        assert await form["image"].read() == b"\xff\xd8\xff\xd9"
    asyncio.run(main())


def test_a_body_that_stops_is_silent():
    async def pieces():
        yield HEAD
        await asyncio.Event().wait()  # Never set: nothing more arrives.
        yield b""

    async def main():
        task = await finished(Body(pieces()), deadline=BOUND, read_timeout=0.01)
        with pytest.raises(UploadTimedOut) as timed_out:
            task.result()
        assert timed_out.value.silent
    asyncio.run(main())


@pytest.mark.parametrize("turns_between_pieces", [1, 2, 3])
def test_a_trickle_ends_at_its_deadline_whichever_turn_a_piece_lands_on(turns_between_pieces):
    """A piece every few turns of the event loop, forever: each of many short deadlines lands on some turn
    of a piece's arrival. asyncio.wait_for on Python 3.11 dropped the deadline on some of those turns
    (python/cpython#86296), and the trickle was then read for as long as it kept coming."""
    async def pieces():
        yield HEAD
        while True:
            for _ in range(turns_between_pieces):
                await asyncio.sleep(0)
            yield b"\0"

    async def main():
        for trial in range(25):
            task = await finished(Body(pieces()), deadline=0.002 + trial / 10_000, read_timeout=BOUND)
            with pytest.raises(UploadTimedOut) as timed_out:
                task.result()
            assert not timed_out.value.silent
    asyncio.run(main())
