"""What a provider's answer does to a message, in one room: the decision tables (``table``: a submission's
answer, a receipt, a reconciliation verdict -> a move), the delays (``delays``), and the mover that makes a
move (``mover``), for the send worker, the reconciler and the receipt processor alike."""
