from tidemq.broker.daemons.brokerd import main

main()
