from vgpu_scheduler.cli import main

raise SystemExit(main())
