from tests.fakeprovider.sandbox.server import main

raise SystemExit(main())
