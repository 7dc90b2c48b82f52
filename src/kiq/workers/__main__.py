from kiq.workers.main import main

main()
