"""What every gateway answers: access, pairing, the owner's first message."""
