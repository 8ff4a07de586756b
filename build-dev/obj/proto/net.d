build-dev/obj/proto/net.o: proto/net.c proto/client-int.h proto/client.h \
 /usr/include/cjson/cJSON.h proto/util.h
proto/client-int.h:
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/util.h:
