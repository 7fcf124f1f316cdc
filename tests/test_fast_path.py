"""``matmul``'s fast path, the parts that need no GPU: the plans' cache retires prepared
launches when it is cleared, and a thread that prepared none takes the checked path."""
import threading

from marlin_cupy import ops


def test_clearing_the_plans_retires_prepared_launches():
    before = ops._plan.generation
    ops._plan.cache_clear()
    assert ops._plan.generation == before + 1
    assert ops._plan.cache_info().currsize == 0
    ops.reload_kernels()                 # reloads clear the plans too
    assert ops._plan.generation == before + 2


def test_use_kernel_retires_prepared_launches_on_entry_and_exit(monkeypatch):
    monkeypatch.setattr(ops, "_cupy", lambda: type("cp", (), {"cuda": type("c", (), {
        "Device": lambda: type("d", (), {"id": 0})()})}))
    before = ops._plan.generation
    cfg = type("cfg", (), {"compiled": "t_probe"})()
    with ops.use_kernel(cfg, object()):
        assert ops._plan.generation == before + 1
    assert ops._plan.generation == before + 2


def test_a_thread_without_prepared_launches_takes_the_checked_path():
    got = {}

    def run():
        got["r"] = ops._fast_matmul(object(), object(), None, None, None, None, False, None)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got["r"] is ops._MISS
