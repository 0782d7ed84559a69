"""A dataset deleted while a study is created on it, at the same moment:
shared by test_datasets (two requests on one hpod) and test_nodes_sync (the
delete on one node, the create on another, one PostgreSQL).

Either the delete sees the study as a user (409) or the create finds the
dataset gone (400 naming it): never both a 204 and a 201, which left a
running study on a dataset that no longer exists. Each round starts the
delete at another moment of the create (from 0.2 of the create's own time
before it to 0.4 into it), so some round lands in the window between the create's check of
the dataset and its insert."""
import threading
import time

from test_datasets import make_csv, upload

STUDY = {"objective": {"metric": "val_accuracy"},
         "model": {"template": "mlp"},
         "space": {"layers": {"type": "int", "low": 1, "high": 2}},
         "training": {"max_epochs": 50, "batch_size": 8},  # still running when the delete comes
         "tuner": {"algorithm": "random", "seed": 1, "max_trials": 100}}
CSV = make_csv(rows=120)


def _upload(hp, name):
    st, out = upload(hp, [("name", name, None), ("format", "csv", None), ("label_column", "species", None),
                          ("file", CSV, "d.csv")])
    if st != 201:
        raise AssertionError("upload of %s -> %d %s" % (name, st, out))
    return out["id"]


def _create(hp, name):
    return hp.request("POST", "/api/v1/studies", dict(STUDY, name="on-" + name, dataset={"name": name}))


def _drop_study(hp, sid):
    hp.request("POST", "/api/v1/studies/%d/cancel" % sid)
    hp.request("DELETE", "/api/v1/studies/%d" % sid)


def check_delete_races_create(c, deleting, creating, rounds=40, label=""):
    """deleting, creating: the Hpod each request goes to (may be the same)."""
    # the create's own time on a dataset nobody deletes
    timing = _upload(deleting, "race-timing")
    t0 = time.monotonic()
    st, out = _create(creating, "race-timing")
    create_s = time.monotonic() - t0
    c.check(st == 201, "%sa study on an uploaded dataset -> 201 (%s %s)" % (label, st, out))
    if st == 201:
        _drop_study(creating, out["id"])
    deleting.request("DELETE", "/api/v1/datasets/%d" % timing)
    outcomes = {}
    both = []
    for k in range(rounds):
        name = "race-%d" % k
        ds = _upload(deleting, name)
        got = {}
        go = threading.Barrier(2)
        delay = create_s * (0.6 * k / rounds - 0.2)  # < 0: the create starts later

        def delete():
            go.wait()
            time.sleep(max(delay, 0))
            got["delete"] = deleting.request("DELETE", "/api/v1/datasets/%d" % ds)

        def create():
            go.wait()
            time.sleep(max(-delay, 0))
            got["create"] = _create(creating, name)

        threads = [threading.Thread(target=delete), threading.Thread(target=create)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        (ds_st, ds_out), (st_st, st_out) = got["delete"], got["create"]
        outcomes[(ds_st, st_st)] = outcomes.get((ds_st, st_st), 0) + 1
        if ds_st == 204 and st_st == 201:
            both.append(k)
        if st_st == 400:
            c.check(st_out["error"]["field"].startswith("dataset"),
                    "%sround %d: the create refused names the dataset (%s)" % (label, k, st_out))
        elif st_st != 201:
            c.check(False, "%sround %d: create -> %d %s" % (label, k, st_st, st_out))
        if ds_st not in (204, 409):
            c.check(False, "%sround %d: delete -> %d %s" % (label, k, ds_st, ds_out))
        if st_st == 201:
            _drop_study(creating, st_out["id"])
        if ds_st != 204:
            deleting.request("DELETE", "/api/v1/datasets/%d" % ds)
    print("%sdataset delete vs study create, %d rounds around a create of %.0f ms: outcomes (delete, create) %s"
          % (label, rounds, create_s * 1e3, outcomes))
    c.check(not both, "%snever both a deleted dataset (204) and a study created on it (201): rounds %s of %d; "
            "outcomes (delete, create): %s" % (label, both, rounds, outcomes))
