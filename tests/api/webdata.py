"""Studies for the dashboard and CLI tests, made through the real API:
a finished study with learning curves and pruned trials, a running one with
trials still open, and a large one (10,000 trials) imported as one
document."""
import datetime
import http.client
import json
import math
import random
import time

SPACE = {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "units": {"type": "int", "low": 16, "high": 512, "step": 16},
    "optimizer": {"type": "choice", "values": ["adam", "sgd", "rmsprop"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.99, "condition": {"optimizer": ["sgd"]}},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
}


def final_loss(p):
    """Validation loss: lr matters most (best near 3e-3), units a little,
    dropout not at all."""
    x = math.log10(p["lr"]) + 2.5
    base = 0.25 + 0.6 * x * x + 0.05 * (1 - p["units"] / 512)
    if p["optimizer"] == "sgd":
        base += 0.1 * (1 - p.get("momentum", 0))
    return base


def curve(p, epoch):
    """Decreasing towards final_loss, noisy-free so pruning is reproducible."""
    return final_loss(p) + 1.5 / (epoch + 1)


class Client:
    """One persistent HTTP/1.1 connection to hpod."""

    def __init__(self, port, token=None, timeout=30):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = "Bearer " + token

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers=self.headers)
        r = self.conn.getresponse()
        text = r.read()
        out = json.loads(text) if text else None
        if r.status >= 300:
            raise AssertionError("%s %s -> %d %s" % (method, path, r.status, out))
        return out

    def close(self):
        self.conn.close()


def train(cl, sid, epochs, tell=True):
    """Asks one trial and trains it for up to `epochs` epochs with reports;
    returns (trial, state)."""
    t = cl.call("POST", "/api/v1/studies/%d/ask" % sid)
    p = t["params"]
    for epoch in range(epochs):
        if cl.call("POST", "/api/v1/trials/%d/report" % t["trial_id"],
                   {"step": epoch, "value": curve(p, epoch)})["prune"]:
            if tell:
                cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"state": "pruned"})
            return t, "pruned"
    if tell:
        cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"value": final_loss(p)})
    return t, "complete" if tell else "running"


def finished_study(port, n=60, epochs=10, name="fmnist-mlp (finished)"):
    cl = Client(port)
    sid = cl.call("POST", "/api/v1/studies", {
        "name": name, "objective": {"direction": "minimize", "metric": "val_loss"}, "space": SPACE,
        "tuner": {"algorithm": "tpe", "seed": 7, "max_trials": n, "n_startup_trials": 10,
                  "pruner": {"algorithm": "median", "n_startup_trials": 5, "warmup_steps": 2}}})["id"]
    states = {"complete": 0, "pruned": 0, "failed": 0}
    for i in range(n):
        if i % 20 == 19:  # a few failures (diverged) for the table's state filter
            t = cl.call("POST", "/api/v1/studies/%d/ask" % sid)
            cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"state": "failed", "error": "loss is NaN"})
            states["failed"] += 1
            continue
        _, st = train(cl, sid, epochs)
        states[st] += 1
    cl.close()
    return sid, states


def running_study(port, done=12, open_=3, max_trials=40, epochs=8):
    cl = Client(port)
    sid = cl.call("POST", "/api/v1/studies", {
        "name": "resnet-ish (running)", "objective": {"direction": "minimize"}, "space": SPACE,
        "tuner": {"algorithm": "random", "seed": 3, "max_trials": max_trials,
                  "pruner": {"algorithm": "median", "n_startup_trials": 3}}})["id"]
    for _ in range(done):
        train(cl, sid, epochs)
    running = []
    for k in range(open_):
        t, _ = train(cl, sid, 2 + k, tell=False)
        running.append(t)
    cl.close()
    return sid, running


def random_params(rng):
    """A configuration of SPACE, drawn as the random sampler would."""
    p = {"lr": 10 ** rng.uniform(-4, -1), "units": 16 * rng.randint(1, 32),
         "optimizer": rng.choice(["adam", "sgd", "rmsprop"]), "dropout": rng.uniform(0, 0.5)}
    if p["optimizer"] == "sgd":
        p["momentum"] = rng.uniform(0, 0.99)
    return p


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat()


def big_study(port, n=10000):
    """n finished trials (every 10th pruned after 3 steps), imported as one
    document (POST /studies/import, hpod --max-body 16 MiB): a tenth of the
    time of n asks and tells, which the ask/tell tests cover."""
    rng = random.Random(1)
    t0 = time.time() - n * 0.01
    trials = []
    for i in range(n):
        p = random_params(rng)
        start, end = t0 + i * 0.01, t0 + i * 0.01 + 0.004 + 0.004 * rng.random()
        t = {"number": i, "params": p, "datetime_start": iso(start), "datetime_complete": iso(end)}
        if i % 10 == 3:
            t.update(state="pruned", intermediate_values={str(s): curve(p, s) for s in range(3)})
        else:
            t.update(state="complete", value=final_loss(p) + random.Random(i).gauss(0, 0.01))
        trials.append(t)
    definition = {"name": "big (10k trials)", "objective": {"direction": "minimize"}, "space": SPACE,
                  "tuner": {"algorithm": "random", "seed": 1, "max_trials": n}}
    cl = Client(port, timeout=300)  # 2 s here; 17 s and more under ThreadSanitizer beside other tests
    try:
        return cl.call("POST", "/api/v1/studies/import",
                       {"format": "hpo.study/1", "study": {"definition": definition}, "trials": trials})["study"]["id"]
    finally:
        cl.close()


TINY_EMBEDDED = {
    "name": "fmnist tiny (embedded)", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
    "space": {"optimizer": {"type": "choice", "values": ["adam"]},
              "lr": {"type": "float", "low": 5e-4, "high": 5e-3, "log": True},
              "units": {"type": "int", "low": 32, "high": 256}},
    "dataset": {"name": "fashion-mnist", "limit": 3000, "validation_split": 1000},
    "training": {"max_epochs": 3, "batch_size": 64},
    "tuner": {"algorithm": "random", "seed": 2, "max_trials": 6}}


def embedded_study(port, timeout=300):
    """hpod trains TINY_EMBEDDED, refits its 2 best trials and builds a
    weighted ensemble of them; returns (study id, refit ids, ensemble id)."""
    cl = Client(port)

    def wait(fn):
        deadline = time.time() + timeout
        while not fn():
            if time.time() > deadline:
                raise AssertionError("timed out")
            time.sleep(0.2)

    sid = cl.call("POST", "/api/v1/studies", TINY_EMBEDDED)["id"]
    wait(lambda: cl.call("GET", "/api/v1/studies/%d" % sid)["state"] == "complete")
    refits = [m["id"] for m in cl.call("POST", "/api/v1/studies/%d/refits" % sid, {"top_n": 2})["refits"]]
    wait(lambda: all(cl.call("GET", "/api/v1/models/%d" % m)["state"] in ("complete", "failed") for m in refits))
    ens = cl.call("POST", "/api/v1/studies/%d/ensembles" % sid, {"members": refits, "method": "weighted"})["id"]
    wait(lambda: cl.call("GET", "/api/v1/models/%d" % ens)["state"] in ("complete", "failed"))
    cl.close()
    return sid, refits, ens


PBT = {
    "name": "fmnist pbt (embedded)", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
    "dataset": {"name": "fashion-mnist", "limit": 600, "validation_split": 200},
    "training": {"max_epochs": 4, "batch_size": 50},
    "tuner": {"algorithm": "pbt", "seed": 4, "max_trials": 20, "population_size": 4, "perturbation_interval": 1}}


def pbt_study(port, timeout=300):
    """hpod trains PBT (a population of 4 ranked every epoch); returns its id."""
    cl = Client(port)
    sid = cl.call("POST", "/api/v1/studies", PBT)["id"]
    deadline = time.time() + timeout
    while cl.call("GET", "/api/v1/studies/%d" % sid)["state"] != "complete":
        if time.time() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.2)
    cl.close()
    return sid


TEMPLATE_ONLY = {
    "name": "fmnist template-only (embedded)", "objective": {"metric": "val_accuracy"}, "model": {"template": "mlp"},
    "dataset": {"name": "fashion-mnist", "limit": 2000, "validation_split": 500},
    "training": {"max_epochs": 2, "batch_size": 64},
    "tuner": {"algorithm": "random", "seed": 5, "max_trials": 4}}


def template_study(port, timeout=300):
    """An embedded study that names only a premade template (no space of
    its own): the study JSON's definition.space carries the template's."""
    cl = Client(port)
    sid = cl.call("POST", "/api/v1/studies", TEMPLATE_ONLY)["id"]
    deadline = time.time() + timeout
    while cl.call("GET", "/api/v1/studies/%d" % sid)["state"] != "complete":
        if time.time() > deadline:
            raise AssertionError("the template-only study did not finish in %d s" % timeout)
        time.sleep(0.2)
    cl.close()
    return sid


def small_study(port, name, done=3, token=None):
    """A running external study with `done` finished trials (for the
    dashboard's pause / resume / cancel / delete buttons)."""
    cl = Client(port, token)
    sid = cl.call("POST", "/api/v1/studies", {
        "name": name, "objective": {"direction": "minimize"}, "space": SPACE,
        "tuner": {"algorithm": "random", "seed": 11, "max_trials": 20}})["id"]
    for _ in range(done):
        train(cl, sid, 3)
    cl.close()
    return sid


def mo_study(port, n_obj, n=40):
    """A finished external study of n_obj objectives (2 or 3; ZDT1-like
    trade-offs on x, y) told by multi-objective TPE, with a constraint
    (x + y <= 1.2) that leaves some trials infeasible."""
    cl = Client(port)
    objectives = [{"metric": "error", "direction": "minimize"}, {"metric": "cost", "direction": "minimize"},
                  {"metric": "latency", "direction": "minimize"}][:n_obj]
    sid = cl.call("POST", "/api/v1/studies", {
        "name": "pareto (%d objectives)" % n_obj, "objectives": objectives,
        "constraints": [{"metric": "size", "max": 1.2}],
        "space": {"x": {"type": "float", "low": 0, "high": 1}, "y": {"type": "float", "low": 0, "high": 1}},
        "tuner": {"algorithm": "tpe", "seed": 7, "n_startup_trials": 10, "max_trials": n}})["id"]
    for _ in range(n):
        t = cl.call("POST", "/api/v1/studies/%d/ask" % sid)
        x, y = t["params"]["x"], t["params"]["y"]
        g = 1 + 2 * y
        values = [x, g * (1 - math.sqrt(x / g)), (1 - x) * (1 - x) + y][:n_obj]
        cl.call("POST", "/api/v1/trials/%d/tell" % t["trial_id"], {"values": values, "metrics": {"size": x + y}})
    cl.close()
    return sid
