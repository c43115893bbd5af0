"""Flow control: pacing within provider and tenant rates, sender capacity, the provider circuit breaker and
provider holds."""
