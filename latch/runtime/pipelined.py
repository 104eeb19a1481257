"""Pipelined updates (experimental, measured by bench/gpu_pipelined_updates.py): the apply
phase of update t — the optimizer's steps, which wait for the gradient norm of the whole
update — in the same CUDA graph as the step phase of update t + 1 (forward and backward),
so that the optimizer's memory traffic may overlap the next forward's kernels.

Measured (H100, TinyMoE; bench/results/pipelined-*.json): the same results as updates one
after the other (bit for bit where those are repeatable), but little time saved: B2 6.41 ms
a steady update against 6.53 one after the other, though its step phase alone takes 4.7 ms
and its apply phase alone 2.0 ms.  The order is not what stops the overlap — the two phases
in one graph with no order between them at all (:meth:`PipelinedUpdates.unordered_step`)
take 6.35–6.46 ms — and neither are the SMs: with the apply phase confined to a green
context of 32 or 48 of the 132 SMs (``apply_sms``) a steady update takes 6.53 / 6.47 ms.
What is left is DRAM: the apply phase streams at the copy bandwidth, and the step phase's
chain of small, memory-latency-bound kernels slows by about what the apply phase saves; see
docs/results-log.md (fifteenth and sixteenth stops).

An update's launch list splits at :func:`apply_phase_start`: the *apply phase* is the
shortest suffix, after the last launch that writes an output, whose every launch depends
(through the manifest's ``after`` lists, transitively) on the launch just before it — in a
program with global-norm clipping, the launches after the clip coefficient.  The *step
phase* is the rest.  Then, with ``P`` the placement of the swapped states
(latch.runtime.commit) that the step of update t read:

* the first update runs its step phase alone (placement ``P``; the *head*);
* every later one runs one graph: the apply phase of the update before it (placement
  ``P``: it reads the old state and writes the new one into the other buffers) and its own
  step phase (placement ``P ^ flips``: it reads that new state) — the *steady* graphs, one
  per placement;
* ``flush()`` runs the pending apply phase alone (the *flush*): call it before reading
  the state.

The order between the two updates' launches comes from the byte ranges each launch can
address (the manifest's ``touches``, with the swapped states' buffers exchanged per
placement) through :func:`latch.runtime.dependencies.launch_dependencies`, as the compiler
orders one update's launches: so each parameter's optimizer launch precedes the first launch
of the next update that reads the parameter (its layer's forward), a launch of the next
update that writes an arena slot waits for the previous update's readers of it, and the
results are those of running the updates one after the other, bit for bit (the bench
checks it).

Not yet done (why this is not a ``latch.compile`` option): the non-finite guard (the flag of
update t is complete only after its apply phase, in the next graph, while that graph's step
phase has already read the new state, and the step phase writes gradients into the old
state's buffers — a parameter's gradient lives in the slot its new value is then written
over, the state's other buffer — so a skipped update could not be rolled back), every(N)
variants, collectives, states that commit by copy.  :class:`PipelinedUpdates` refuses those
programs with a :class:`LatchError`.
"""
from __future__ import annotations

import contextlib

from latch.errors import LatchError
from latch.runtime import commit, streams
from latch.runtime import driver as drv
from latch.runtime.dependencies import launch_dependencies


def apply_phase_start(launches: list[dict]) -> int | None:
    """The index of the first launch of the apply phase (see the module docstring), or
    None when the launch list has no such suffix (or no ``after`` lists)."""
    n = len(launches)
    after = [la.get("after") for la in launches]
    if not n or any(a is None for a in after):
        return None
    writes_output = [i for i, la in enumerate(launches)
                     if any("output" in a for a in la.get("args", ()) if isinstance(a, dict))]
    first = (max(writes_output) + 1) if writes_output else 1
    # descendants of each launch (bit j set: launch j depends on it, transitively)
    children = [[] for _ in range(n)]
    for i, deps in enumerate(after):
        for d in deps:
            children[d].append(i)
    below = [0] * n
    for i in reversed(range(n)):
        b = 0
        for c in children[i]:
            b |= (1 << c) | below[c]
        below[i] = b
    best = None
    for s in range(first, n):
        suffix = ((1 << n) - 1) ^ ((1 << s) - 1)        # bits s .. n-1
        if below[s - 1] & suffix == suffix:
            best = s                                    # the shortest such suffix wins
    return best


def placed(touches: list, at_new: frozenset, slots: dict) -> list[tuple]:
    """``touches`` (``[space, lo, hi, write]``, optionally with the strided rows
    ``[period, first, width]``, latch.runtime.dependencies) as the launch addresses them in
    placement ``at_new``: each state in it lives in its new-value slot (``slots``: {state:
    (arena offset, bytes)}) and its new value goes to the state buffer (the rows' first
    byte moved with the range)."""
    out = []
    for touch in touches:
        space, lo, hi, write = touch[:4]
        lanes = list(touch[4]) if len(touch) > 4 else None
        was = lo
        if space.startswith("state "):
            k = int(space.split()[1])
            if k in at_new:
                a = slots[k][0]
                space, lo, hi = "arena", a + lo, a + hi
        elif space == "arena":
            for k in at_new:
                a, n = slots[k]
                if a <= lo and hi <= a + n:
                    space, lo, hi = f"state {k}", lo - a, hi - a
                    break
                if lo < a + n and a < hi:
                    raise LatchError(f"a launch addresses bytes {lo}..{hi} of the arena, "
                                     f"across state {k}'s new-value slot {a}..{a + n}")
        if lanes is not None:
            lanes[1] = (lanes[1] + lo - was) % lanes[0]
        out.append((space, lo, hi, write) + ((tuple(lanes),) if lanes else ()))
    return out


def combined_after(parts: list[tuple[list, frozenset]], slots: dict) -> list[list[int]]:
    """``after`` lists for the launches of ``parts`` ([(launch specs, placement)]) run one
    part after the other in one graph."""
    touched = []
    for specs, at_new in parts:
        for spec in specs:
            if "touches" not in spec:
                raise LatchError(f"launch of {spec.get('module')!r} has no 'touches' (an "
                                 "artifact from before they were recorded): recompile it")
            touched.append(placed(spec["touches"], at_new, slots))
    return launch_dependencies(touched)


def side_by_side_after(parts: list[tuple[list, frozenset]], slots: dict) -> list[list[int]]:
    """``after`` lists for the launches of ``parts`` with each part ordered within itself
    and no order between parts (a timing diagnostic: :meth:`PipelinedUpdates.
    unordered_step`)."""
    out: list[list[int]] = []
    for part in parts:
        base = len(out)
        out += [[d + base for d in deps] for deps in combined_after([part], slots)]
    return out


class PipelinedUpdates:
    """Run a :class:`~latch.runtime.program.CudaProgram`'s updates pipelined (see the module
    docstring): ``step(*inputs)`` runs the pending apply phase and this update's step phase
    and returns the outputs; ``flush()`` runs the pending apply phase, after which the
    program's state is that of every update so far.  No non-finite guard."""

    def __init__(self, prog, priorities: bool = False, apply_dependent: bool = False,
                 apply_sms: int | None = None):
        if len(prog.variants) != 1:
            raise LatchError("pipelined updates: programs with every(N) variants are not "
                             "supported")
        variant = prog.variants[0]
        if variant.spec.get("collectives"):
            raise LatchError("pipelined updates: data-parallel programs are not supported")
        written = commit.written_states(variant.spec)
        if not written <= set(prog.swap.slots):
            raise LatchError("pipelined updates need every new state value to commit by swap "
                             f"(states {sorted(written - set(prog.swap.slots))} commit by "
                             "copy)")
        self.start = apply_phase_start(variant.spec["launches"])
        if self.start is None:
            raise LatchError("pipelined updates: the launch list has no apply phase (no "
                             "launch that every later launch depends on, after the outputs)")
        self.prog, self.variant = prog, variant
        self.specs = variant.spec["launches"]
        self.flips = variant.flips
        self.pending: frozenset | None = None   # placement of the step whose apply is due
        self.graphs: dict = {}                  # (kind, placement) -> CUDA graph
        self.events: dict = {}                  # (kind, placement) -> streams.Events
        # streams: the program's own (fork and join only), as many for the step phase as
        # the program uses, and one for the apply phase, whose launches depend on nothing
        # in their graph: on one stream of their own, in the order the next forward needs
        # them, they never stand in a step launch's stream queue.  ``priorities``: the step
        # phase's streams at the greatest scheduling priority (the next forward's chain of
        # small kernels), so the block scheduler takes their blocks before the apply
        # phase's pending ones (bulk memory traffic).
        self.priorities = priorities
        greatest = drv.priority_range()[1] if priorities else None
        self.step_streams = [drv.Stream(prog.device, priority=greatest)
                             for _ in range(max(1, len(prog.side_streams)))]
        # ``apply_sms``: the apply phase in a green context of that many SMs (an SM
        # partition: its blocks never take the SMs the step phase's kernels run on)
        self.green = drv.GreenContext(prog.device, apply_sms) if apply_sms else None
        self.apply_stream = self.green.stream() if self.green else drv.Stream(prog.device)
        # the apply phase's kernels launched plainly (``apply_dependent`` False): with
        # programmatic stream serialization each of them is launched as soon as every block
        # of the one before it has started, so its blocks hold the SMs, waiting, while that
        # one finishes, and the step phase's blocks find no room between them
        self.apply_dependent = apply_dependent and prog.dependent_launches and not self.green
        self._apply_launches: dict = {}
        self.uses: dict = {}

    # -- graphs ---------------------------------------------------------------------------
    def _parts(self, kind: str, at: frozenset) -> list:
        """[(phase, launch specs, launch objects, placement)] of a head, steady or flush
        graph."""
        s, made = self.start, self.variant.setup
        apply_part = ("apply", self.specs[s:], self._apply(at), at)
        if kind == "head":
            return [("step", self.specs[:s], made(at).launches[:s], at)]
        if kind == "flush":
            return [apply_part]
        if kind == "unordered":     # timing diagnostic: see unordered_step
            return [apply_part, ("step", self.specs[:s], made(at).launches[:s], at)]
        nxt = at ^ self.flips
        return [apply_part, ("step", self.specs[:s], made(nxt).launches[:s], nxt)]

    def _apply(self, at: frozenset) -> list:
        """The apply phase's launch objects in placement ``at``."""
        found = self._apply_launches.get(at)
        if found is None:
            if self.apply_dependent:
                found = self.variant.setup(at).launches[self.start:]
            else:
                from latch.runtime.program import make_launches

                specs, modules = self.specs[self.start:], self.prog.modules
                where = contextlib.nullcontext()
                if self.green is not None:     # its kernels from modules loaded there
                    modules = {la["module"]: self.green.load(modules[la["module"]])
                               for la in specs}
                    where = self.green.current()
                with where:
                    found = make_launches(specs, modules, self.prog.resolver(at), False)
            self._apply_launches[at] = found
        return found

    def _record(self, kind: str, at: frozenset) -> None:
        """Enqueue one graph's launches on the program's streams (see _Variant's planned
        enqueue), then the output copies of its step phase."""
        prog = self.prog
        parts = self._parts(kind, at)
        if kind == "unordered":
            after = side_by_side_after([(specs, place) for _, specs, _, place in parts],
                                       prog.swap.slots)
        else:
            after = combined_after([(specs, place) for _, specs, _, place in parts],
                                   prog.swap.slots)
        launches = [la for _, _, objs, _ in parts for la in objs]
        side = self.step_streams + [self.apply_stream]
        pinned = [len(side) if phase == "apply" else None
                  for phase, _, objs, _ in parts for _ in objs]
        plan = streams.plan(after, 1 + len(side), streams.policy_wanted(), pinned=pinned,
                            avoid=frozenset({0}))
        events = self.events.get((kind, at))
        if events is None:
            events = self.events[(kind, at)] = streams.Events(plan)
        streams.enqueue(plan, launches, prog.stream, side, events)
        if kind != "flush":
            for src, dst, n in self.variant.setup(parts[-1][3]).copies:
                drv.memcpy_dtod(dst, src, n, prog.stream, "output")

    def _run(self, kind: str, at: frozenset) -> None:
        """The first use of a graph launches its kernels directly (as the program's first
        step does: modules finish loading outside a capture); the second captures the
        graph; later uses replay it."""
        key = (kind, at)
        graph = self.graphs.get(key)
        if graph is None and not self.uses.get(key):
            self._record(kind, at)
        elif graph is None:
            graph = drv.Graph.capture(self.prog.stream, lambda: self._record(kind, at),
                                      node_priority=self.priorities)
            self.graphs[key] = graph
        if graph is not None:
            graph.launch(self.prog.stream)
        self.uses[key] = self.uses.get(key, 0) + 1

    # -- the API --------------------------------------------------------------------------
    def step(self, *inputs):
        """One update's step phase, after the pending apply phase; returns its outputs."""
        def run():
            prog = self.prog
            if self.pending is None:
                at = prog.at_new
                self._run("head", at)
            else:
                self._run("steady", self.pending)
                at = self.pending ^ self.flips
                prog.at_new = at             # the applied update's state lives there now
            self.pending = at
        return self.prog.run_step(inputs, run)

    def unordered_step(self, *inputs) -> None:
        """A timing diagnostic, not an update: one graph of the apply phase and the step
        phase in the same placement with no order between the two (they race on the
        gradients and new state values: the state is garbage afterwards — reload it).
        Its time against the step phase alone and the two one after the other tells how
        much running side by side costs the step phase's chain when nothing makes it
        wait for the apply phase.  Runs between the caller's stream and the program's as
        :meth:`step` does (so CUDA events on the caller's stream time it)."""
        if self.pending is not None:
            raise LatchError("unordered_step: flush the pending apply phase first")
        self.prog.run_step(inputs, lambda: self._run("unordered", self.prog.at_new))

    def flush(self) -> None:
        """Run the pending apply phase (if any): the program's state is then that of every
        update so far."""
        if self.pending is None:
            return
        self._run("flush", self.pending)
        self.prog.at_new = self.pending ^ self.flips
        self.pending = None
        self.prog.stream.synchronize("pipelined flush")

    def close(self) -> None:
        for g in self.graphs.values():
            g.destroy()
        for e in self.events.values():
            e.destroy()
        for st in self.step_streams + [self.apply_stream]:
            st.destroy()
        if self.green is not None:
            self.green.destroy()
        self.graphs, self.events, self.step_streams, self.apply_stream = {}, {}, [], None
        self.green = None
