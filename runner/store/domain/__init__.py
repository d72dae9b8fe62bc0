"""Backend-neutral store rules (issue 12, the store seam): each module states one
concept's guards and transitions once, over a narrow transaction handle; the
backends (sqlite/, postgres/) supply connections, transactions and dialect bits."""
