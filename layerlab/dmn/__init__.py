"""Density-matrix networks: closed-form layers by class-based PCA.

Dehmamy, Rohani, Katsaggelos, "Separation of time scales and direct computation
of weights in deep neural networks" (arXiv:1703.04757).
"""
from layerlab.dmn._apply import conv3x3 as conv3x3
from layerlab.dmn._apply import dmn_apply as dmn_apply
from layerlab.dmn._apply import dmn_conv_apply as dmn_conv_apply
from layerlab.dmn._apply import dmn_dense_apply as dmn_dense_apply
from layerlab.dmn._apply import grid_patches as grid_patches
from layerlab.dmn._apply import max_pool_2x2 as max_pool_2x2
from layerlab.dmn._apply import standardize_features as standardize_features
from layerlab.dmn._build import BuildInfo as BuildInfo
from layerlab.dmn._build import DMNConfig as DMNConfig
from layerlab.dmn._build import build_dmn as build_dmn
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
from layerlab.dmn._density import density_update_grouped as density_update_grouped
from layerlab.dmn._density import energies as energies
from layerlab.dmn._density import filter_correlation as filter_correlation
from layerlab.dmn._density import fix_signs as fix_signs
from layerlab.dmn._density import naive_density_matrix as naive_density_matrix
from layerlab.dmn._density import num_components as num_components
from layerlab.dmn._density import select_filters as select_filters
from layerlab.dmn._density import sharded_class_density_matrices as sharded_class_density_matrices
from layerlab.dmn._density import (
    streaming_class_density_matrices as streaming_class_density_matrices,
)
from layerlab.dmn._filters import back_project as back_project
from layerlab.dmn._filters import filter_energies as filter_energies
from layerlab.dmn._filters import plot_energies as plot_energies
from layerlab.dmn._filters import plot_filters as plot_filters
from layerlab.dmn._head import Conv3x3 as Conv3x3
from layerlab.dmn._head import Head as Head
from layerlab.dmn._head import Network as Network
from layerlab.dmn._head import add_input_noise as add_input_noise
from layerlab.dmn._head import classifier_step as classifier_step
from layerlab.dmn._head import head_variables as head_variables
from layerlab.dmn._head import make_network as make_network
from layerlab.dmn._head import map_batches as map_batches
from layerlab.dmn._spec import Layer as Layer
from layerlab.dmn._spec import convnet_spec as convnet_spec
from layerlab.dmn._spec import format_spec as format_spec
from layerlab.dmn._spec import parse_spec as parse_spec
from layerlab.dmn._spec import split_spec as split_spec
from layerlab.dmn._timescales import distance_to_final as distance_to_final
from layerlab.dmn._timescales import eigenvalue_convergence as eigenvalue_convergence
from layerlab.dmn._timescales import eigenvalue_fluctuations as eigenvalue_fluctuations
from layerlab.dmn._timescales import eq18_variance as eq18_variance
from layerlab.dmn._timescales import layer_spectra as layer_spectra
from layerlab.dmn.experiments import train_and_evaluate as train_and_evaluate

__all__ = [
    "BuildInfo",
    "Conv3x3",
    "DMNConfig",
    "DensityState",
    "Filters",
    "Head",
    "Layer",
    "Network",
    "add_input_noise",
    "back_project",
    "build_dmn",
    "class_density_matrices",
    "classifier_step",
    "convnet_spec",
    "data_fraction_indices",
    "density_eigh",
    "density_finalize",
    "density_from_chunks",
    "density_init",
    "density_merge",
    "density_update",
    "density_update_grouped",
    "distance_to_final",
    "dmn_apply",
    "dmn_conv_apply",
    "dmn_dense_apply",
    "eigenvalue_convergence",
    "energies",
    "eigenvalue_fluctuations",
    "eq18_variance",
    "filter_correlation",
    "filter_energies",
    "fix_signs",
    "format_spec",
    "grid_patches",
    "head_variables",
    "layer_spectra",
    "make_network",
    "map_batches",
    "conv3x3",
    "max_pool_2x2",
    "naive_density_matrix",
    "num_components",
    "parse_spec",
    "plot_energies",
    "plot_filters",
    "select_filters",
    "sharded_class_density_matrices",
    "split_spec",
    "standardize_features",
    "train_and_evaluate",
    "streaming_class_density_matrices",
]
