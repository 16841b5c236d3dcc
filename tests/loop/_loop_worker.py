"""Subprocess helper for tests/loop/test_distributed.py (not collected by pytest).

Modes (argv[1]):
  mesh  OUT.json              8 simulated CPU devices: sharded fit vs single-device fit.
  dist  RANK PORT OUT.npz     one of two processes joined by jax.distributed (4 devices each).
  ckpt  DIR OUT.json [KILL]   fit with checkpoints; with KILL, SIGKILL itself once the
                              checkpoint of step KILL is on disk (a simulated preemption).
Device-count flags must be set (XLA_FLAGS) by the parent before this module imports jax.
"""
import json
import os
import signal
import sys
import time

import jax
import numpy as np
import optax

from layerlab import loop, nets

N, D, C = 64, 6, 3
STEPS, BATCH = 6, 16


def problem(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, D)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0.5).astype(np.int32)
    return x, y


def loss_fn(params, batch):
    x, y = batch
    logits = nets.mlp_apply(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def train_step():
    return loop.optax_step(loss_fn, optax.adam(0.05))


def init_state():
    return train_step().init(nets.mlp_init(jax.random.key(1), [D, 8, C]))


def eval_loss(xv, yv, state):
    return {"loss": loss_fn(state.params, (xv, yv))}


def flat(params):
    return np.concatenate([np.asarray(a).ravel() for a in jax.tree_util.tree_leaves(params)])


def run_mesh(out):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    assert jax.device_count() == 8, jax.devices()
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    x, y = problem()
    ts = train_step()
    key = jax.random.key(0)
    res = {}
    # (a) minibatches, replicated data set, replicated state; an eval_fn Partial whose bound
    # data sit on one device (fit replicates them once beside the state)
    xv = jax.device_put(x[:32], jax.devices()[3])
    ev = jax.tree_util.Partial(eval_loss, xv, y[:32])
    s1, h1 = loop.fit(ts.step, init_state(), (x, y), steps=STEPS, batch_size=BATCH, key=key,
                      progress=False, eval_fn=ev, eval_every=3)
    s8, h8 = loop.fit(ts.step, init_state(), (x, y), steps=STEPS, batch_size=BATCH, key=key,
                      progress=False, mesh=mesh, eval_fn=ev, eval_every=3)
    res["eval_partial"] = float(np.max(np.abs(h1["eval"]["loss"] - h8["eval"]["loss"])))
    res["eval_partial_matches_direct"] = float(abs(
        h8["eval"]["loss"][-1] - loss_fn(s8.params, (x[:32], y[:32]))))
    leaf = jax.tree_util.tree_leaves(s8.params)[0]
    res["minibatch"] = float(np.max(np.abs(flat(s1.params) - flat(s8.params))))
    res["minibatch_loss"] = float(np.max(np.abs(h1["train"]["loss"] - h8["train"]["loss"])))
    res["state_replicated"] = bool(leaf.sharding.is_fully_replicated)
    res["n_devices_state"] = len(leaf.sharding.device_set)
    # (b) full batch with the data set itself sharded over the devices
    s1, _ = loop.fit(ts.step, init_state(), (x, y), steps=STEPS, key=key, progress=False)
    s8, _ = loop.fit(ts.step, init_state(), (x, y), steps=STEPS, key=key, progress=False,
                     mesh=mesh, data_sharding=NamedSharding(mesh, P("data")))
    res["fullbatch_sharded_data"] = float(np.max(np.abs(flat(s1.params) - flat(s8.params))))
    # (c) a runs axis (2 seeds) on the mesh
    states = jax.vmap(lambda k: ts.init(nets.mlp_init(k, [D, 8, C])))(
        jax.random.split(jax.random.key(5), 2))
    s1, _ = loop.fit(ts.step, states, (x, y), steps=STEPS, batch_size=BATCH, key=key,
                     progress=False, runs=True)
    s8, _ = loop.fit(ts.step, states, (x, y), steps=STEPS, batch_size=BATCH, key=key,
                     progress=False, runs=True, mesh=mesh)
    res["runs"] = float(np.max(np.abs(flat(s1.params) - flat(s8.params))))
    with open(out, "w") as f:
        json.dump(res, f)


def run_dist(rank, port, out):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    pid, count = loop.initialize_distributed(f"localhost:{port}", 2, rank,
                                             initialization_timeout=60)
    assert (pid, count) == (rank, 2) and jax.device_count() == 8 and jax.local_device_count() == 4
    mesh = jax.make_mesh((8,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    x, y = problem()
    half = slice(rank * N // 2, (rank + 1) * N // 2)  # this process's samples only
    sh = NamedSharding(mesh, P("data"))
    gx = jax.make_array_from_process_local_data(sh, x[half], (N, D))
    gy = jax.make_array_from_process_local_data(sh, y[half], (N,))
    ts = train_step()
    s, h = loop.fit(ts.step, init_state(), (gx, gy), steps=STEPS, batch_size=BATCH,
                    key=jax.random.key(0), progress=False, mesh=mesh)
    np.savez(out, params=flat(s.params), loss=h["train"]["loss"])
    jax.distributed.shutdown()


def ckpt_state():
    return {"train": init_state(), "noise_key": jax.random.key(7)}


def ckpt_step(state, batch, key):
    # a step whose state carries a typed PRNG key (it must survive the checkpoint round trip)
    k_use, k_next = jax.random.split(state["noise_key"])
    x, y = batch
    x = x + 0.01 * jax.random.normal(k_use, x.shape)
    train, m = train_step().step(state["train"], (x, y), key)
    return {"train": train, "noise_key": k_next}, m


def run_ckpt(directory, kill_at=None, progress=False):
    x, y = problem()
    first = []

    def cb(t, state, metrics):
        first.append(t)
        if kill_at is not None and t == kill_at:  # kill_at must be a checkpoint step
            deadline = time.time() + 30
            while not os.path.isdir(os.path.join(directory, str(t))) and time.time() < deadline:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)

    s, h = loop.fit(ckpt_step, ckpt_state(), (x, y), steps=8, batch_size=BATCH,
                    key=jax.random.key(3), checkpoint_dir=directory, checkpoint_every=4,
                    callback=cb, progress=progress)
    return s, h, first


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "mesh":
        run_mesh(sys.argv[2])
    elif mode == "dist":
        run_dist(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    elif mode == "ckpt":
        kill = int(sys.argv[4]) if len(sys.argv) > 4 else None
        s, h, first = run_ckpt(sys.argv[2], kill)
        with open(sys.argv[3], "w") as f:
            json.dump({"params": flat(s["train"].params).tolist(),
                       "key": np.asarray(jax.random.key_data(s["noise_key"])).tolist(),
                       "loss": h["train"]["loss"].tolist(),
                       "steps": h["step"].tolist(), "first_callback_t": first[0]}, f)
    else:
        raise SystemExit(f"unknown mode {mode}")
