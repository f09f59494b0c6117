from tidemq.broker.main import main

main()
