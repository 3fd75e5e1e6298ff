"""The zeroth-order machinery the methods of `pazo.methods` are built on, below them (it imports
nothing from `pazo.methods`): perturbation directions (`directions`: seeded, flat and subspace
direction sets; `layout`: how a direction is cut into groups, pieces and draws; `bases`: the
orthonormal and normalised bases of a few vectors), the two engines that evaluate losses at
perturbed parameters and apply updates (`engines`), bit-exact queries of half-precision models
(`half_precision`), moving tensors to their parameters' devices (`placement`), and a plain
reference of the private two-point step (`reference`), which the tests hold the methods to.
"""
