"""pytest plugin (session 45, device call 2): after every test, the locks of every eager
workspace must be zero (ops.Workspace: "zero between calls"). Reports each test after which
some are not, with the indices and values, to $LOCKCHECK_OUT (JSON lines); changes nothing."""
import json
import os


def pytest_runtest_teardown(item, nextitem):
    try:
        import cupy as cp
        from marlin_cupy import ops
    except Exception:
        return
    try:
        cp.cuda.Device().synchronize()
    except Exception as e:          # noqa: BLE001
        rows = [{"test": item.nodeid, "sync_error": repr(e)}]
    else:
        rows = []
        for key, ws in list(ops._workspaces.items()):
            if ws.locks is None:
                continue
            nz = cp.flatnonzero(ws.locks)
            if nz.size:
                idx = cp.asnumpy(nz[:40]).tolist()
                vals = cp.asnumpy(ws.locks[nz[:40]]).tolist()
                rows.append({"test": item.nodeid, "workspace": [int(key[0]), int(key[1]), bool(key[2])],
                             "size": int(ws.locks.size), "nonzero": int(nz.size),
                             "idx": idx, "vals": vals})
    if rows:
        with open(os.environ["LOCKCHECK_OUT"], "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
