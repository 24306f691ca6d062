"""``python -m rangekv ...`` runs the rangekv CLI (rangekv/_cli.py), like the ``rangekv``
command."""

if __name__ == "__main__":
    from rangekv._cli import main

    main()
