"""Hardware back ends of neurenix."""
