"""``sniper bench``: measure sniper and a peer in the same run and print the ratio.

Machines here are shared and noisy, so absolute times drift; every bench interleaves sniper and
its peer on the same inputs and reports medians and the ratio, which holds.
"""
