"""Human verification of users (spec §5): challenges, the fence, button callbacks."""
