"""Orthonormal and normalised bases of a few vectors (k << d): the subspaces PAZO-P searches in
(`orthonormal_basis` of its public gradients, in float64; PAZO-P' `normalized_rows`) and the
orthogonal directions of DP-ZOGD (`orthonormal_basis` of a Gaussian block). Gram-Schmidt runs on
the k x k Gram matrix (`gram_schmidt_coefficients`) and the basis is made from the vectors a block
of columns at a time (`combine_rows`).
"""
from __future__ import annotations

import math

import numpy as np
import torch


def orthonormal_basis(grads: torch.Tensor, rel_tol: float = 1e-5) -> torch.Tensor:
    """Orthonormal rows spanning the rows of grads [k, d], for k << d: the Q of a QR with positive
    diagonal (Gram-Schmidt), in float64. Gram-Schmidt runs on the k x k Gram matrix, each basis row
    kept as its coefficients over the gradients (`gram_schmidt_coefficients`), and the basis is made
    in one [rank, k] x [k, d] product; then once more on that basis, which restores the
    orthogonality the Gram matrix's rounding costs (as CholeskyQR2 does: float64 rounding while the
    kept gradients' condition number stays under about 1e7). So four passes over the d-vectors and
    two k x k host copies, not two dot products and two updates of a d-vector per pair of rows and a
    host sync per row (cuSOLVER's QR of a tall d x k matrix is slow too). Rows whose remainder is
    negligible next to their own norm (linearly dependent or zero gradients) are dropped, and so are
    rows with inf or nan entries (or a float64 norm over about 1e154), so the result is [rank, d]."""
    rows = grads.to(torch.float64, copy=True)    # our own copy: the products below overwrite it
    gram = (rows @ rows.T).tolist()
    finite = [i for i, row in enumerate(gram) if math.isfinite(row[i])]
    if len(finite) < len(gram):   # a diverging run's gradient: dropped, the rest kept
        rows, gram = rows[finite], [[gram[i][j] for j in finite] for i in finite]
    coefficients = gram_schmidt_coefficients(gram, rel_tol)
    if not coefficients:
        return grads.new_zeros((0, grads.shape[1]))
    basis = combine_rows(coefficients, rows)
    # once more on the basis itself: the orthogonality the Gram matrix's rounding cost comes back
    basis = combine_rows(gram_schmidt_coefficients((basis @ basis.T).tolist(), rel_tol), basis)
    return basis.to(grads.dtype).contiguous()


#: `combine_rows` takes a [k, d] block at least this many columns at a time ...
COMBINE_COLUMNS = 2 ** 16
#: ... and in at most about this many blocks (a [k, d / 16] float64 temporary), so that a large
#: model's basis is a few products, not thousands (each a few microseconds of host time on a GPU)
COMBINE_BLOCKS = 16


def combine_rows(coefficients: list[list[float]], rows: torch.Tensor) -> torch.Tensor:
    """C @ rows for coefficient rows C [r, k] (r <= k), written over rows[:r] a block of columns at
    a time (a block of the product needs that block of rows only) and returned as that view: no
    second [r, d] matrix, which for a large model's k float64 gradients is gigabytes (RoBERTa-base,
    k = 6: the basis's peak resident set is 15 GB on CPU with blocks of 2^16 columns against 23 GB
    with a second matrix; blocks of d / 16 columns add about 0.4 GB to it). The blocks agree with
    one product of the whole to float64 rounding, not always bit for bit (the BLAS may order a
    whole matrix's terms otherwise); a matrix of at most `COMBINE_COLUMNS` columns is one product,
    so a small model's numbers are those of the plain product."""
    c = rows.new_tensor(coefficients)
    if rows.shape[1] <= COMBINE_COLUMNS:
        return c @ rows
    r, columns = c.shape[0], max(COMBINE_COLUMNS, math.ceil(rows.shape[1] / COMBINE_BLOCKS))
    for lo in range(0, rows.shape[1], columns):
        block = rows[:, lo:lo + columns]
        block[:r] = c @ block
    return rows[:r]


#: up to this many vectors, Gram-Schmidt on their Gram matrix runs on Python floats, beyond it on numpy
PYTHON_GRAM_SCHMIDT = 8


def gram_schmidt_coefficients(gram: list[list[float]], rel_tol: float) -> list[list[float]]:
    """Gram-Schmidt with re-orthogonalisation (twice is enough: Giraud et al. 2005) of k vectors
    known only by their Gram matrix G [k, k]: the orthonormal basis as coefficient rows C [rank, k]
    (basis = C @ vectors). Vector i is dropped when what remains of it after projecting out the basis
    so far has a norm of at most rel_tol times its own (the remainder's squared norm comes from G:
    accurate to about 1e-16 / rel_tol^2 of itself, 1e-6 at the default). A handful of vectors (the
    usual k) on Python floats, where each small array operation would cost more than its
    arithmetic; more on numpy, O(k^2) per vector in a few calls instead of O(k^2) Python operations."""
    k = len(gram)
    if k > PYTHON_GRAM_SCHMIDT:
        return _gram_schmidt_numpy(np.asarray(gram, dtype=np.float64), rel_tol).tolist()
    basis, images = [], []     # the rows C_r and G C_r: <q_r, v> = C_r G c = (G C_r) . c for v = c V
    for i in range(k):
        c = [0.0] * k
        c[i] = 1.0
        for _ in range(2):
            for row, image in zip(basis, images):
                dot = sum([a * b for a, b in zip(image, c)])
                c = [a - dot * b for a, b in zip(c, row)]
        image = [sum([a * b for a, b in zip(g_row, c)]) for g_row in gram]
        norm_sq = sum([a * b for a, b in zip(c, image)])
        if gram[i][i] > 0 and norm_sq > rel_tol ** 2 * gram[i][i]:
            norm = math.sqrt(norm_sq)
            basis.append([a / norm for a in c])
            images.append([a / norm for a in image])
    return basis


def _gram_schmidt_numpy(gram: np.ndarray, rel_tol: float) -> np.ndarray:
    """`gram_schmidt_coefficients` on numpy: each vector's projections on the whole basis so far at
    once (classical Gram-Schmidt, twice per vector)."""
    k = len(gram)
    basis, images, rank = np.zeros((k, k)), np.zeros((k, k)), 0
    for i in range(k):
        c = np.zeros(k)
        c[i] = 1.0
        for _ in range(2):
            c -= basis[:rank].T @ (images[:rank] @ c)
        image = gram @ c
        norm_sq = float(c @ image)
        if gram[i, i] > 0 and norm_sq > rel_tol ** 2 * gram[i, i]:
            norm = math.sqrt(norm_sq)
            basis[rank], images[rank] = c / norm, image / norm
            rank += 1
    return basis[:rank]


def normalized_rows(grads: torch.Tensor) -> torch.Tensor:
    """Each gradient divided by its norm (PAZO-P'); zero gradients are dropped."""
    norms = grads.norm(dim=1)
    keep = norms > 0
    return (grads[keep] / norms[keep, None]).contiguous()
