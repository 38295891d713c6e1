"""Chargeback: monthly statements (closed months as issued, with their corrections), reconciled."""
