"""Administration: the admin API (`api`, RocketMQ's MQAdminExt) and the `mqadmin` command
line (`cli`, RocketMQ's tools module).
"""
