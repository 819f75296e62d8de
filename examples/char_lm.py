"""A character-level language model trained on the repository's own documentation, then sampled.

Embedding -> LSTM (or GRU) -> Linear, softmax cross-entropy on the next character. The text is cut into
``--batch-size`` parallel streams read ``--window`` characters at a time (truncated backpropagation
through time): one compiled step takes a window and the state the previous window ended in, returns the
loss and the state to feed the next window, and updates the weights with Adam. Gradients stop at the
window's start, since the state comes in as data. Sampling runs a second compiled function, one
character per call, from the same layers.

    python examples/char_lm.py [--steps 250] [--cell lstm|gru] [--hidden 128] [--window 48]
"""
from __future__ import annotations

import argparse
import os
import pathlib
import time

# One BLAS thread: the matrices of one step are small, and more threads only wait on each other (several
# times slower on a busy machine). Set before numpy loads; a variable already set is left alone.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import staticgrad as sg  # noqa: E402
from staticgrad import nn, optim  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_text():
    """README.md and docs/*.md of this repository, one after another."""
    paths = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    return "\n\n".join(p.read_text(encoding="utf-8") for p in paths if p.exists())


class CharModel:
    """The three layers, and the two functions compiled from them: a training step and a sampling step."""

    def __init__(self, vocab, embed, hidden, cell, seed):
        rng = np.random.default_rng(seed)
        self.embed = nn.Embedding(vocab, embed, seed=rng)
        self.rnn = {"lstm": nn.LSTM, "gru": nn.GRU}[cell](embed, hidden, seed=rng)
        self.head = nn.Linear(hidden, vocab, seed=rng, name="head")
        self.n_states = 2 if cell == "lstm" else 1
        self.hidden = hidden

    def parameters(self):
        return self.embed.parameters() + self.rnn.parameters() + self.head.parameters()

    def __call__(self, ids, state):
        """Logits (T, B, vocab) of the next character and the final state, for ids (T, B)."""
        output, final = self.rnn(self.embed(ids), state[0] if self.n_states == 1 else tuple(state))
        return self.head(output), (list(final) if self.n_states == 2 else [final])

    def state_holders(self, batch):
        return [sg.placeholder((1, batch, self.hidden), name=f"state{k}") for k in range(self.n_states)]

    def zero_state(self, batch):
        return [np.zeros((1, batch, self.hidden)) for _ in range(self.n_states)]

    def compile_step(self, lr):
        """(the training step, the same loss without the update for held-out text)."""
        ids = sg.placeholder((None, None), dtype="int64", name="ids")
        targets = sg.placeholder((None, None), dtype="int64", name="targets")
        state = self.state_holders(None)
        logits, final = self(ids, state)
        loss = nn.softmax_cross_entropy(logits, targets)
        opt = optim.Adam(self.parameters(), lr=lr)
        inputs = [ids, targets] + state
        return (sg.compile([loss] + final, inputs=inputs, updates=opt.updates(loss)),
                sg.compile([loss] + final, inputs=inputs))

    def compile_sampler(self):
        ids = sg.placeholder((1, 1), dtype="int64", name="char")
        state = self.state_holders(1)
        logits, final = self(ids, state)
        return sg.compile([sg.log_softmax(logits[0, 0])] + final, inputs=[ids] + state)


def streams(encoded, batch, window):
    """The text as ``batch`` rows read side by side; yields (ids, targets), each (window, batch)."""
    per_row = (len(encoded) - 1) // batch
    rows = encoded[:per_row * batch].reshape(batch, per_row)
    nexts = encoded[1:per_row * batch + 1].reshape(batch, per_row)
    for start in range(0, per_row - window + 1, window):
        yield rows[:, start:start + window].T.copy(), nexts[:, start:start + window].T.copy()


def split_blocks(encoded, size, every):
    """(the text without every ``every``-th block of ``size`` characters, those blocks): held-out text
    from all over, not only the end (the last document is mostly formulas)."""
    blocks = [encoded[k:k + size] for k in range(0, len(encoded), size)]
    held = [b for k, b in enumerate(blocks) if k % every == every - 1]
    return np.concatenate([b for k, b in enumerate(blocks) if k % every != every - 1]), np.concatenate(held)


def evaluate(loss_fn, model, encoded, batch, window):
    """Mean loss per character over all of ``encoded``, the state carried from window to window."""
    state, total, count = model.zero_state(batch), 0.0, 0
    for ids, targets in streams(encoded, batch, window):
        loss, *state = loss_fn(ids, targets, *state)
        total, count = total + float(loss) * ids.size, count + ids.size
    return total / count


def sample(sampler, model, chars, index, prime, length, temperature, rng):
    """``prime`` and then ``length`` characters drawn one at a time from the model at ``temperature``."""
    state = model.zero_state(1)
    out = list(prime)
    for ch in prime[:-1]:
        _, *state = sampler(np.array([[index[ch]]]), *state)
    current = index[prime[-1]]
    for _ in range(length):
        logp, *state = sampler(np.array([[current]]), *state)
        p = np.exp(logp / temperature)
        current = int(rng.choice(len(chars), p=p / p.sum()))
        out.append(chars[current])
    return "".join(out)


def train(step, model, encoded, args):
    """``args.steps`` windows, passes over the text repeated as needed; the loss of each."""
    losses, started = [], time.perf_counter()
    report_every = max(args.steps // 10, 1)
    while len(losses) < args.steps:
        state = model.zero_state(args.batch_size)         # each pass over the text starts afresh
        for ids, targets in streams(encoded, args.batch_size, args.window):
            loss, *state = step(ids, targets, *state)
            losses.append(float(loss))
            if len(losses) % report_every == 0 or len(losses) == 1:
                recent = np.mean(losses[-report_every:])
                print(f"step {len(losses):4d}  loss {recent:.3f} nats/char  ({time.perf_counter() - started:.1f} s)")
            if len(losses) == args.steps:
                break
    return losses, time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description="a character-level LSTM/GRU language model on this repo's docs")
    parser.add_argument("--steps", type=int, default=250, help="training windows")
    parser.add_argument("--cell", choices=["lstm", "gru"], default="lstm")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--embed", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--window", type=int, default=48)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--sample", type=int, default=300, help="characters to sample at the end")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    text = load_text()
    chars = sorted(set(text))
    index = {c: k for k, c in enumerate(chars)}
    encoded = np.array([index[c] for c in text], dtype=np.int64)
    train_ids, held_out = split_blocks(encoded, 2000, 10)
    print(f"{len(text):,} characters of README.md and docs/*.md, {len(chars)} distinct; {len(held_out):,} of "
          f"them held out (every 10th block of 2,000)")
    model = CharModel(len(chars), args.embed, args.hidden, args.cell, args.seed)
    (step, loss_fn), sampler = model.compile_step(args.lr), model.compile_sampler()
    eval_batch = 8
    before = evaluate(loss_fn, model, held_out, eval_batch, args.window)
    losses, seconds = train(step, model, train_ids, args)
    after = evaluate(loss_fn, model, held_out, eval_batch, args.window)
    print(f"{len(losses)} steps of {args.batch_size} x {args.window} characters in {seconds:.1f} s "
          f"({seconds / len(losses) * 1000:.0f} ms a step)")
    print(f"held-out loss {before:.3f} -> {after:.3f} nats/char (uniform guessing: {np.log(len(chars)):.3f})")
    text_out = sample(sampler, model, chars, index, "The ", args.sample, 0.8, np.random.default_rng(args.seed))
    print("sampled:\n" + text_out)
    return {"loss": losses, "held_out": (before, after), "sample": text_out, "seconds": seconds}


if __name__ == "__main__":
    main()
