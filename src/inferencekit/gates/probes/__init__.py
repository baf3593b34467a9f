"""What the gates send: probe plans and texts, and the collectors that send them and keep every reply."""
