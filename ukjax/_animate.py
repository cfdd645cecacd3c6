"""Drawings of configurations (`Sketch`, what each system's `sketch` returns) and animations
of solutions."""

import abc
import warnings
from collections.abc import Sequence
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._jit import jit


class Sketch(eqx.Module):
    """A stick figure of one configuration, in 2D or 3D world coordinates: the links as line
    segments, the joints and sites as points, and the loop closures as gaps (segments between
    two points that the constraints make coincide: they show as soon as a closure opens).
    Leading batch dimensions are allowed (a sketch mapped over time or over a batch).

    **Arguments:**

    - `links`: segments, shape (l, 2, d).
    - `points`: points, shape (k, d).
    - `gaps`: segments, shape (g, 2, d) (default none).
    - `parts`: the part each link belongs to, one integer per link (default all 0); an
      animation of one solution draws each part in its own colour. [`ukjax.animate`][]'s
      joined drawings (a composed system, a path a constraint draws) number their parts apart.
    """

    links: Float[Array, "*batch l 2 d"]
    points: Float[Array, "*batch k d"]
    gaps: Float[Array, "*batch g 2 d"]
    parts: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self,
        links: Float[ArrayLike, "l 2 d"],
        points: Float[ArrayLike, "k d"],
        gaps: Float[ArrayLike, "g 2 d"] | None = None,
        parts: Sequence[int] | None = None,
    ):
        self.links, self.points = jnp.asarray(links), jnp.asarray(points)
        d = self.points.shape[-1]
        self.gaps = jnp.zeros((0, 2, d), self.points.dtype) if gaps is None else jnp.asarray(gaps)
        self.parts = (0,) * self.links.shape[-3] if parts is None else tuple(int(k) for k in parts)

    def __check_init__(self):
        d = self.points.shape[-1]
        if d not in (2, 3) or self.links.shape[-2:] != (2, d) or self.gaps.shape[-2:] != (2, d):
            raise ValueError(
                "A Sketch needs links (l, 2, d), points (k, d) and gaps (g, 2, d) with d = 2 or 3; got "
                f"{self.links.shape}, {self.points.shape}, {self.gaps.shape}."
            )
        if len(self.parts) != self.links.shape[-3] or any(k < 0 for k in self.parts):
            raise ValueError(
                f"A Sketch needs one non-negative part number per link: {self.links.shape[-3]} links, "
                f"parts {self.parts}."
            )

    @property
    def dimension(self) -> int:
        """2 or 3."""
        return self.points.shape[-1]


class AbstractDrawn(eqx.Module):
    """Something that draws itself: a system with a geometry (its stick figure, what
    [`ukjax.animate`][] draws), or a wrapper that draws what it wraps. Subclass it beside the
    system's own base (`class Pendulum(ukjax.AbstractUnconstrainedSystem, ukjax.AbstractDrawn)`)
    with a `sketch(t, q)` method."""

    @abc.abstractmethod
    def sketch(self, t: ArrayLike, q: Float[Array, " n"]) -> Sketch:
        """A stick figure of the configuration `q` at time `t`.

        **Returns:**

        A [`ukjax.Sketch`][].
        """


def sketch_of(system, t: ArrayLike, q: Float[Array, " n"]) -> Sketch:
    """`system.sketch(t, q)`, with an error that says how to draw a system that does not."""
    if not isinstance(system, AbstractDrawn):
        raise NotImplementedError(
            f"{type(system).__name__} does not say how it is drawn: make it a ukjax.AbstractDrawn with a "
            "sketch(t, q) method returning a ukjax.Sketch. A worked example: 'Drawing your own system' on "
            "the documentation site (docs/examples/sketch.py in the repository)."
        )
    return system.sketch(t, q)


def join(*sketches: Sketch | None) -> Sketch:
    """One sketch of several (None entries skipped), each keeping its parts, numbered after
    those of the sketches before it; 2D sketches are drawn in the `z = 0` plane when any is
    3D."""
    sketches = [s for s in sketches if s is not None]
    d = max(s.dimension for s in sketches)

    def lift(x):
        return jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (d - x.shape[-1],), x.dtype)], axis=-1)

    parts, first = [], 0
    for s in sketches:
        parts += [first + k for k in s.parts]
        first += max(s.parts, default=-1) + 1
    arrays = (jnp.concatenate([lift(getattr(s, f)) for s in sketches]) for f in ("links", "points", "gaps"))
    return Sketch(*arrays, parts=parts)


def _polyline(segments: np.ndarray) -> np.ndarray:
    """Segments (..., s, 2, d) as one NaN-separated polyline (..., 3 s, d) for one artist."""
    breaks = np.full(segments.shape[:-2] + (1, segments.shape[-1]), np.nan)
    return np.concatenate([segments, breaks], axis=-2).reshape(segments.shape[:-3] + (-1, segments.shape[-1]))


def animate(
    system,
    sol,
    path: str | Path,
    *,
    fps: int = 30,
    every: int = 1,
    violation: dict[str, tuple[Sequence[int], str]] | None = None,
):
    """Write an animation of a solution: each saved time `sol.ts` (every `every`-th) is one
    frame of the system's stick figure (its `sketch`), the time and the constraint violation
    in the title. One solution is drawn with each part of its sketch in its own colour; a
    batch's members are overlaid, each in its own colour. Unfinished members' frames
    (non-finite states) are left blank; the others are drawn. A mechanism that stays in one
    plane is drawn in 2D, in that plane. The axes stay fixed, unless the mechanism travels
    beyond twice its own size (a robot falling or flying): then the view follows it.

    **Arguments:**

    - `system`: the simulated system, a [`ukjax.AbstractDrawn`][] (or a wrapper of one).
    - `sol`: a [`ukjax.Solution`][] from `simulate` (`q` of shape (T, n)) or `simulate_batch`
      ((B, T, n)).
    - `path`: the file: `.gif` (matplotlib's Pillow writer), or `.mp4` where ffmpeg is on the
      machine.
    - `fps`: frames per second; `every`: draw every `every`-th saved time.
    - `violation`: which rows of `sol.phi` the title reports, as `{label: (rows, unit)}`
      (e.g. `{"tool position": ([0, 1, 3], "m"), "orientation": ([2], "rad")}`), so that rows
      of different units are not mixed; default: the largest `|Φ|` of all rows, said to be
      in the rows' own units.

    **Returns:**

    The matplotlib `Figure`, showing the last frame.
    """
    from matplotlib import animation
    from matplotlib.figure import Figure

    path = Path(path)
    if path.suffix not in (".gif", ".mp4"):
        raise ValueError(f"animate writes .gif or .mp4 files, got {path.name!r}.")
    if path.suffix == ".mp4" and not animation.writers.is_available("ffmpeg"):
        raise ValueError("Writing .mp4 needs ffmpeg on the PATH; write a .gif instead.")
    if not isinstance(every, int) or every < 1 or fps < 1:
        raise ValueError(f"every and fps must be positive integers, got every={every!r}, fps={fps!r}.")
    q, ts = jnp.asarray(sol.q), jnp.asarray(sol.ts)
    if q.ndim not in (2, 3):
        raise ValueError(f"sol.q must have shape (T, n) or (B, T, n), got {q.shape}.")
    batched = q.ndim == 3
    q, ts = (q, ts) if batched else (q[None], ts[None])
    q, ts = q[:, ::every], ts[:, ::every]
    finite = jnp.all(jnp.isfinite(q), axis=-1) & jnp.isfinite(ts)
    # unfinished saves hold inf: draw a finite stand-in, then blank those frames
    sketch_of(system, ts[0, 0], q[0, 0])  # the error for a system that cannot be drawn, before tracing
    sketches = jit(lambda s, t, q: jax.vmap(jax.vmap(s.sketch))(t, q))(
        system, jnp.where(finite, ts, 0.0), jnp.where(finite[..., None], q, 0.0)
    )
    blank = ~np.asarray(finite)
    links, points, gaps = (
        np.where(blank[(...,) + (None,) * (x.ndim - 2)], np.nan, np.asarray(x))
        for x in (sketches.links, sketches.points, sketches.gaps)
    )
    titles = _violation_titles(sol, batched, every, violation)

    # every drawn point per frame: (frames, members × points, d)
    frames, d = q.shape[1], sketches.dimension
    everything = np.concatenate([x.swapaxes(0, 1).reshape(frames, -1, d) for x in (links, points, gaps)], axis=1)
    axes_drawn = _plane(everything) if d == 3 else [0, 1]
    links, points, gaps, everything = (x[..., axes_drawn] for x in (links, points, gaps, everything))
    d = len(axes_drawn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # all-NaN frames (nothing finished) stay NaN
        low, high = np.nanmin(everything, axis=1), np.nanmax(everything, axis=1)
    half = max(float(np.nanmax(high - low)) / 2, 1e-3) * 1.05
    centres = (low + high) / 2
    # a mechanism that travels far beyond its own size (a falling robot) is followed by the
    # view; one that stays put is drawn in fixed axes
    span = np.nanmax(high, axis=0) - np.nanmin(low, axis=0)
    follow = float(np.max(span)) / 2 > 2 * half
    fixed = (np.nanmax(high, axis=0) + np.nanmin(low, axis=0)) / 2
    if not follow:
        half = max(float(np.max(span)) / 2, 1e-3) * 1.05

    fig = Figure(figsize=(6, 6), dpi=100)
    ax = fig.add_subplot(projection="3d" if d == 3 else None)
    names = ["xyz"[k] for k in axes_drawn]

    def view(frame):
        centre = centres[frame] if follow and np.all(np.isfinite(centres[frame])) else fixed
        for setter, c in zip(("set_xlim", "set_ylim", "set_zlim"), centre):
            getattr(ax, setter)(c - half, c + half)

    for setter, name in zip(("set_xlabel", "set_ylabel", "set_zlabel"), names):
        getattr(ax, setter)(f"{name} [m]")
    if d == 3:
        ax.set_box_aspect((1, 1, 1))
    else:
        ax.set_aspect("equal")
    parts = np.asarray(sketches.parts, dtype=int)
    # one solution: a colour per part; a batch: a colour per member, all its parts alike
    groups = [parts == k for k in sorted(set(parts.tolist()))]
    members = []
    for member in range(q.shape[0]):
        colours = [f"C{member % 10}"] * len(groups) if batched else [f"C{k % 10}" for k in range(len(groups))]
        members.append(
            (
                [(group, ax.plot(*[[]] * d, "-", color=c, lw=2)[0]) for group, c in zip(groups, colours)],
                ax.plot(*[[]] * d, "o", color=f"C{member % 10}" if batched else "0.25", ms=4)[0],
                ax.plot(*[[]] * d, "-", color="red", lw=2)[0],
            )
        )
    title = ax.set_title("")
    times = np.asarray(ts)

    def put(line, data):
        if d == 3:
            line.set_data_3d(*data.T)
        else:
            line.set_data(*data.T)

    def draw(frame):
        view(frame)
        for member, (by_part, dots, gap) in enumerate(members):
            for group, line in by_part:
                put(line, _polyline(links[member, frame][group]))
            put(dots, points[member, frame])
            put(gap, _polyline(gaps[member, frame]))
        t = times[:, frame][np.isfinite(times[:, frame])]
        text = f"t = {t.max():.3f} s" if t.size else "unfinished"
        title.set_text("\n".join([text] + [line(frame) for line in titles]))
        artists = [line for by_part, dots, gap in members for _, line in by_part]
        return artists + [dots for _, dots, _ in members] + [gap for _, _, gap in members] + [title]

    anim = animation.FuncAnimation(fig, draw, frames=frames, blit=False)
    writer = animation.PillowWriter(fps=fps) if path.suffix == ".gif" else animation.FFMpegWriter(fps=fps)
    anim.save(str(path), writer=writer)
    draw(frames - 1)
    return fig


def _plane(everything: np.ndarray) -> list[int]:
    """The axes to draw: two where every point of every frame lies in a plane normal to the
    third (a planar mechanism written in 3D), else all three."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        span = np.nanmax(everything, axis=(0, 1)) - np.nanmin(everything, axis=(0, 1))
    if not np.all(np.isfinite(span)):
        return [0, 1, 2]
    flat = int(np.argmin(span))
    if span[flat] > 1e-9 * max(float(np.max(span)), 1e-12):
        return [0, 1, 2]
    return [k for k in range(3) if k != flat]


def _violation_titles(sol, batched: bool, every: int, violation) -> list:
    """One function per line of the title, frame → text, for the rows `violation` names."""
    phi = sol.phi
    if phi is None or phi.shape[-1] == 0:
        return []
    phi = np.abs(np.asarray(phi if batched else phi[None])[:, ::every])
    phi = np.where(np.isfinite(phi), phi, np.nan)
    groups = violation if violation is not None else {"largest |Φ|": (range(phi.shape[-1]), "in the rows' own units")}
    lines = []
    for label, (rows, unit) in groups.items():
        rows = np.asarray(list(rows), dtype=int)
        if rows.size == 0:
            continue
        if rows.min() < 0 or rows.max() >= phi.shape[-1]:
            raise ValueError(f"violation[{label!r}] names rows {rows.tolist()}; sol.phi has {phi.shape[-1]}.")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # frames that no member finished
            largest = np.nanmax(phi[..., rows], axis=(0, 2), initial=0.0)
        lines.append(lambda frame, label=label, unit=unit, largest=largest: f"{label} {largest[frame]:.1e} {unit}")
    return lines
