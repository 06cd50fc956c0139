/*
 * The variadic libc entry points of libsluice_preload.so. Stable Rust cannot define a
 * C-variadic function, so these read the one optional argument (as glibc itself does:
 * an int or a pointer, both fit in a machine word) and hand it to the Rust side.
 */
#include <stdarg.h>

extern int sluice_preload_fcntl(int fd, int cmd, unsigned long arg, int is64);
extern int sluice_preload_ioctl(int fd, unsigned long request, unsigned long arg);

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return sluice_preload_fcntl(fd, cmd, (unsigned long)arg, 0);
}

int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return sluice_preload_fcntl(fd, cmd, (unsigned long)arg, 1);
}

int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return sluice_preload_ioctl(fd, request, (unsigned long)arg);
}
