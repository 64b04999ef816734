"""``python -m nmt_cli`` runs the command line (also what ``torchrun -m nmt_cli`` starts)."""

from .cli import main

if __name__ == "__main__":
    main()
