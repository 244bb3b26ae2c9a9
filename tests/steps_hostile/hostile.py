"""Hostile Python steps for the tests (issue 51): what each does is chosen by the image's red level, so one run
of several rows meets them all. NumPy only: a step's module is imported in each step process.

    red % 7 == 0   raises (every 7th image of rows whose red levels count 1, 2, 3, ...)
    249            returns the image 100 times larger each way (more than a test's --max_pixels)
    250            sleeps forever
    251            sys.exit(3)
    254            os._exit(7), only while a file `crash_now` lies beside this one (so that a rerun resumes)
    253            a segfault (SIGSEGV)
    anything else  passed on as it is

Every call prints to stdout first, through Python and straight to file descriptor 1.
`failing_set_up` and `hanging_set_up` are steps whose set-up raises or never returns.
"""

import os
import signal
import sys
import time

from beam_pipeline import python_step


@python_step
def hostile(image):
    red = int(image[0, 0, 0])
    print(f"hostile step says {red}")
    os.write(1, b"hostile step writes to fd 1\n")
    if red % 7 == 0:
        raise ValueError(f"red level {red} is a multiple of 7")
    if red == 249:
        return image.repeat(100, axis=0).repeat(100, axis=1)
    if red == 250:
        while True:
            time.sleep(3600)
    if red == 251:
        sys.exit(3)
    if red == 254 and os.path.exists(os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_now")):
        os._exit(7)
    if red == 253:
        os.kill(os.getpid(), signal.SIGSEGV)
    return image.copy()


def _failing_set_up():
    raise RuntimeError("set-up boom")


def _hanging_set_up():
    while True:
        time.sleep(3600)


@python_step(setup=_failing_set_up)
def failing_set_up(image, state):
    return image.copy()


@python_step(setup=_hanging_set_up)
def hanging_set_up(image, state):
    return image.copy()
