r"""Classification accuracy of scores against labels: the one ``accuracy`` in layerlab."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from layerlab._checks import check_array
from layerlab.data._targets import as_labels


def accuracy(logits: ArrayLike, labels: ArrayLike) -> jax.Array:
    r"""Fraction of samples whose highest score is the true class.

    .. math:: \mathrm{acc} = \frac{1}{N}\sum_{i=1}^{N}
              \big[\operatorname{argmax}_c z_{ic} = y_i\big]

    Ties go to the first maximal class (``jnp.argmax``). **NaN when any logit is NaN or
    +inf** (a diverged model: ``argmax`` of a NaN row is 0, which used to count as a
    prediction of class 0), eagerly and under ``jit`` alike, never an error: it is a metric
    of evaluation loops, and :func:`layerlab.loop.fit` records a NaN metric as it comes.
    ``-inf`` is a score like any other (classes masked with ``-inf`` are never predicted
    while a row has a larger score); a row that is ``-inf`` everywhere has no argmax and
    gives NaN too.
    Pure ``jnp``: jit or vmap it at the call site. For a set too large for one forward
    pass, concatenate the logits of chunks first (e.g. ``layerlab.dmn.map_batches``).

    Args:
      logits: ``[N, C]`` per-class scores :math:`z` (logits, probabilities, regression
        outputs read as class scores).
      labels: ``[N]`` integer labels in ``[0, C)``, or ``[N, C]`` one-hot (or zero-mean
        one-hot) rows whose argmax is the label (``layerlab.data.as_labels``).

    Returns:
      scalar in ``[0, 1]``, float32 whatever the logits' dtype (x64 included: only their
      argmax is read, and float32 holds ``k / N`` to ~6e-8 relative); NaN when a logit is
      NaN or +inf, or a row is -inf everywhere.

    Raises:
      ValueError: ``logits`` not ``[N, C]`` with ``N >= 1``; labels of another length or
        width, or (eager calls) out of ``[0, C)``.  TypeError: float ``[N]`` labels.

    Examples:
      >>> import jax.numpy as jnp
      >>> from layerlab import probes
      >>> logits = jnp.array([[2.0, 0.1], [0.3, 0.9], [1.0, 0.0]])
      >>> round(float(probes.accuracy(logits, jnp.array([0, 1, 1]))), 4)
      0.6667
      >>> float(probes.accuracy(logits, jnp.eye(2)[jnp.array([0, 1, 0])]))  # one-hot rows
      1.0
    """
    logits = check_array(logits, "logits", fn="accuracy", ndim=2, kind="real", min_rows=1)
    n, c = logits.shape
    labels = as_labels(labels, c, name="labels", n=n, fn="accuracy")
    return _accuracy(logits, labels)


@jax.jit
def _accuracy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """:func:`accuracy` of checked ``logits`` ``[N, C]`` and int ``labels`` ``[N]``, as one
    program per shapes (eagerly, each of its ~13 ops was its own)."""
    acc = jnp.mean(jnp.argmax(logits, axis=-1) == labels)
    # NaN or +inf scores, or a row of -inf only, have no argmax: NaN, not the hit rate of
    # class 0 (-inf masks are fine; integer logits are always finite)
    ok = ~jnp.any(jnp.isnan(logits) | (logits == jnp.inf)) & jnp.all(
        jnp.any(logits > -jnp.inf, axis=-1))
    return jnp.where(ok, acc, jnp.nan)
