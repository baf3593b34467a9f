from inferencekit.cli import main

raise SystemExit(main())
