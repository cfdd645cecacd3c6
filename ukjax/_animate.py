"""Drawings of configurations (`Sketch`, what each system's `sketch` returns) and animations
of solutions."""

import warnings
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
    """

    links: Float[Array, "*batch l 2 d"]
    points: Float[Array, "*batch k d"]
    gaps: Float[Array, "*batch g 2 d"]

    def __init__(
        self,
        links: Float[ArrayLike, "l 2 d"],
        points: Float[ArrayLike, "k d"],
        gaps: Float[ArrayLike, "g 2 d"] | None = None,
    ):
        self.links, self.points = jnp.asarray(links), jnp.asarray(points)
        d = self.points.shape[-1]
        self.gaps = jnp.zeros((0, 2, d), self.points.dtype) if gaps is None else jnp.asarray(gaps)

    def __check_init__(self):
        d = self.points.shape[-1]
        if d not in (2, 3) or self.links.shape[-2:] != (2, d) or self.gaps.shape[-2:] != (2, d):
            raise ValueError(
                "A Sketch needs links (l, 2, d), points (k, d) and gaps (g, 2, d) with d = 2 or 3; got "
                f"{self.links.shape}, {self.points.shape}, {self.gaps.shape}."
            )

    @property
    def dimension(self) -> int:
        """2 or 3."""
        return self.points.shape[-1]


def join(*sketches: Sketch | None) -> Sketch:
    """One sketch of several parts (None entries skipped); 2D parts are drawn in the `z = 0`
    plane when any part is 3D."""
    sketches = [s for s in sketches if s is not None]
    d = max(s.dimension for s in sketches)

    def lift(x):
        return jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (d - x.shape[-1],), x.dtype)], axis=-1)

    return Sketch(*(jnp.concatenate([lift(getattr(s, f)) for s in sketches]) for f in ("links", "points", "gaps")))


def _polyline(segments: np.ndarray) -> np.ndarray:
    """Segments (..., s, 2, d) as one NaN-separated polyline (..., 3 s, d) for one artist."""
    breaks = np.full(segments.shape[:-2] + (1, segments.shape[-1]), np.nan)
    return np.concatenate([segments, breaks], axis=-2).reshape(segments.shape[:-3] + (-1, segments.shape[-1]))


def animate(system, sol, path: str | Path, *, fps: int = 30, every: int = 1):
    """Write an animation of a solution: each saved time `sol.ts` (every `every`-th) is one
    frame of the system's stick figure (its `sketch`), a batch's members overlaid in
    different colours, the time and the largest constraint violation in the title. Unfinished
    members' frames (non-finite states) are left blank; the others are drawn. The axes stay
    fixed, unless the mechanism travels beyond twice its own size (a robot falling or
    flying): then the view follows it.

    **Arguments:**

    - `system`: the simulated system (anything with a `sketch(t, q)` method).
    - `sol`: a [`ukjax.Solution`][] from `simulate` (`q` of shape (T, n)) or `simulate_batch`
      ((B, T, n)).
    - `path`: the file: `.gif` (matplotlib's Pillow writer), or `.mp4` where ffmpeg is on the
      machine.
    - `fps`: frames per second; `every`: draw every `every`-th saved time.

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
    sketches = jit(lambda s, t, q: jax.vmap(jax.vmap(s.sketch))(t, q))(
        system, jnp.where(finite, ts, 0.0), jnp.where(finite[..., None], q, 0.0)
    )
    blank = ~np.asarray(finite)
    links, points, gaps = (
        np.where(blank[(...,) + (None,) * (x.ndim - 2)], np.nan, np.asarray(x))
        for x in (sketches.links, sketches.points, sketches.gaps)
    )
    phi = getattr(sol, "phi", None)
    closure = None
    if phi is not None and phi.shape[-1] > 0:
        phi = np.abs(np.asarray(phi if batched else phi[None])[:, ::every])
        closure = np.nanmax(np.where(np.isfinite(phi), phi, np.nan), axis=(0, 2), initial=0.0)

    d = sketches.dimension
    fig = Figure(figsize=(6, 6), dpi=100)
    ax = fig.add_subplot(projection="3d" if d == 3 else None)
    # every drawn point per frame: (frames, members × points, d)
    frames = q.shape[1]
    everything = np.concatenate(
        [x.swapaxes(0, 1).reshape(frames, -1, d) for x in (links, points, gaps)], axis=1
    )
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

    def view(frame):
        centre = centres[frame] if follow and np.all(np.isfinite(centres[frame])) else fixed
        for axis, c in zip("xyz", centre):
            getattr(ax, f"set_{axis}lim")(c - half, c + half)

    for axis in "xyz"[:d]:
        getattr(ax, f"set_{axis}label")(axis)
    if d == 3:
        ax.set_box_aspect((1, 1, 1))
    else:
        ax.set_aspect("equal")
    colours = [f"C{i % 10}" for i in range(q.shape[0])]
    artists = [
        (
            ax.plot(*[[]] * d, "-", color=colour, lw=2)[0],
            ax.plot(*[[]] * d, "o", color=colour, ms=4)[0],
            ax.plot(*[[]] * d, "-", color="red", lw=2)[0],
        )
        for colour in colours
    ]
    title = ax.set_title("")
    times = np.asarray(ts)

    def draw(frame):
        view(frame)
        for member, lines in enumerate(artists):
            for line, data in zip(lines, (_polyline(links[member, frame]), points[member, frame], _polyline(gaps[member, frame]))):
                if d == 3:
                    line.set_data_3d(*data.T)
                else:
                    line.set_data(*data.T)
        t = times[:, frame][np.isfinite(times[:, frame])]
        text = f"t = {t.max():.3f} s" if t.size else "unfinished"
        if closure is not None:
            text += f"   largest violation {closure[frame]:.1e}"
        title.set_text(text)
        return [line for lines in artists for line in lines] + [title]

    anim = animation.FuncAnimation(fig, draw, frames=frames, blit=False)
    writer = animation.PillowWriter(fps=fps) if path.suffix == ".gif" else animation.FFMpegWriter(fps=fps)
    anim.save(str(path), writer=writer)
    draw(frames - 1)
    return fig

