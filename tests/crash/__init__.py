"""Kill tests: real processes SIGKILLed at random instants."""
