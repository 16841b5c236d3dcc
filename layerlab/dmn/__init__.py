"""Density-matrix networks: closed-form layers by class-based PCA.

Dehmamy, Rohani, Katsaggelos, "Separation of time scales and direct computation
of weights in deep neural networks" (arXiv:1703.04757).
"""
from layerlab.dmn._density import DensityState as DensityState
from layerlab.dmn._density import Filters as Filters
from layerlab.dmn._density import class_density_matrices as class_density_matrices
from layerlab.dmn._density import data_fraction_indices as data_fraction_indices
from layerlab.dmn._density import density_eigh as density_eigh
from layerlab.dmn._density import density_finalize as density_finalize
from layerlab.dmn._density import density_from_chunks as density_from_chunks
from layerlab.dmn._density import density_init as density_init
from layerlab.dmn._density import density_merge as density_merge
from layerlab.dmn._density import density_update as density_update
from layerlab.dmn._density import fix_signs as fix_signs
from layerlab.dmn._density import naive_density_matrix as naive_density_matrix
from layerlab.dmn._density import num_components as num_components
from layerlab.dmn._density import select_filters as select_filters
from layerlab.dmn._density import sharded_class_density_matrices as sharded_class_density_matrices
from layerlab.dmn._density import (
    streaming_class_density_matrices as streaming_class_density_matrices,
)

__all__ = [
    "DensityState",
    "Filters",
    "class_density_matrices",
    "data_fraction_indices",
    "density_eigh",
    "density_finalize",
    "density_from_chunks",
    "density_init",
    "density_merge",
    "density_update",
    "fix_signs",
    "naive_density_matrix",
    "num_components",
    "select_filters",
    "sharded_class_density_matrices",
    "streaming_class_density_matrices",
]
