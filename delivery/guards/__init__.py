"""Guards: the suppression list (opt-outs), destination guards (countries, prefixes, deny lists), velocity
limits, screening and review holds."""
