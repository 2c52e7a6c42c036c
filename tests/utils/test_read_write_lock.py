"""reid/utils/read_write_lock.py: readers together, a writer alone, a waiting writer before new readers."""
from __future__ import annotations

import threading
import time

from reid.utils.read_write_lock import ReadWriteLock


def test_readers_hold_it_together_and_a_writer_waits_for_them():
    lock = ReadWriteLock()
    inside, most, events = [0], [0], []
    both_in = threading.Barrier(2, timeout=10)

    def reader(name):
        with lock.reading():
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            both_in.wait()  # only passes when two readers hold the lock at once
            events.append(f"{name} out")
            inside[0] -= 1

    readers = [threading.Thread(target=reader, args=(f"r{i}",)) for i in range(2)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(30)
    assert most[0] == 2 and not both_in.broken
    with lock.writing():
        events.append("writer")
    assert events[-1] == "writer" and sorted(events[:2]) == ["r0 out", "r1 out"]


def test_a_writer_is_alone_and_goes_before_readers_that_come_after_it():
    lock = ReadWriteLock()
    order = []
    release_first = threading.Event()
    first_in = threading.Event()

    def first_reader():
        with lock.reading():
            first_in.set()
            release_first.wait(10)
            order.append("first reader")

    def writer():
        with lock.writing():
            order.append("writer")

    def late_reader():
        with lock.reading():
            order.append("late reader")

    t1 = threading.Thread(target=first_reader)
    t1.start()
    assert first_in.wait(10)
    tw = threading.Thread(target=writer)
    tw.start()
    while not lock._waiting:  # the writer is waiting for the first reader
        time.sleep(0.001)
    t3 = threading.Thread(target=late_reader)
    t3.start()
    time.sleep(0.05)
    assert order == []  # the late reader waits behind the writer, the writer behind the first reader
    release_first.set()
    for t in (t1, tw, t3):
        t.join(10)
    assert order == ["first reader", "writer", "late reader"]


def test_an_error_inside_releases_it():
    lock = ReadWriteLock()
    for hold in (lock.reading, lock.writing):
        try:
            with hold():
                raise KeyError("x")
        except KeyError:
            pass
    with lock.writing():  # neither a reader nor a writer is left holding it
        pass
