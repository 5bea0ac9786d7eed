"""The examples under examples/, run as their users would."""
